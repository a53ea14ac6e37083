"""The frontend-free core: a session's life (`session`), the providers and tools it runs on
(`runtime`), tiers at work (`routing`), resuming (`resumption`), slash commands (`slash`),
Markdown structure (`markdown_blocks`) and server launch recipes (`recipes`).

It may import `config`, `paths`, `sessions`, `agent` and `providers`; never a frontend
(`tui`, `headless`) and never Textual.
"""
