"""The tools the agent calls: the registry, the built-ins that read (`builtins`, confined by
`workspace`), the ones that act (`edit`, `shell` with its `sandbox` and `processes`), and MCP servers'
(`mcp`, `mcp_transport`, `mcp_config`, `mcp_import`).

Part of the `agent` layer: it may import `providers` and nothing above.
"""
