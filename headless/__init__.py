"""The headless frontend: `hotloop run` (`run`), its printer (`printer`, `markdown_stream`), the
line naming the session saved (`saved`), and `hotloop bench` (`bench`, `bench_view`).

It may import `core` and everything below it; never `tui`, never Textual.
"""
