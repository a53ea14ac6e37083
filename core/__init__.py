"""The frontend-free core: a session's life (`session`), the providers, simulator, tools and agents it runs on
(`runtime`), which tier answers (`routing`) and the helper tier's jobs (`side_jobs`), the log kept
(`log_keeper`), the context meter, the switch menu, the server watched (`server_watch`), resuming
(`resumption`), slash commands (`slash`) and Markdown structure (`markdown_blocks`).

It may import `config`, `paths`, `sessions`, `agent` and `providers`, and of the simulator only
`runtime` may (to start it); never a frontend (`tui`, `headless`) and never Textual.
"""
