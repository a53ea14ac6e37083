"""The frontend-free core: a session's life (`session`), the providers, simulator, tools and agents it runs on
(`runtime`), which tier answers (`routing`) and the helper tier's jobs (`side_jobs`), the log kept
(`log_keeper`), the context meter, the switch menu, the server watched (`server_watch`), resuming
(`resumption`), slash commands (`slash`), Markdown structure (`markdown_blocks`), OpenTelemetry spans
(`telemetry`), the prefix sent ahead of need (`prewarm`), the MCP commands (`mcp_controls`) and the agents a session
makes (`agent_maker`).

It may import `config`, `paths`, `sessions`, `agent` and `providers`, and of the simulator only
`runtime` may (to start it); never a frontend (`tui`, `headless`, `acp_server`) and never Textual.
"""
