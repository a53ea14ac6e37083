"""The headless frontend: `hotloop run` (`run`), its printer (`printer`, `markdown_stream`),
and the terminal commands on saved sessions (`session_commands`).

It may import `core` and everything below it; never `tui`, never Textual.
"""
