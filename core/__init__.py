"""The frontend-free core: a session's life (`session`), the providers and tools it runs on
(`runtime`), tiers at work (`routing`), resuming (`resumption`), slash commands (`slash`) and
Markdown structure (`markdown_blocks`).

It may import `config`, `paths`, `sessions`, `agent` and `providers`; never a frontend
(`tui`, `headless`) and never Textual.
"""
