"""The ACP frontend: `hotloop acp`, hotloop as an Agent Client Protocol agent over stdio, for editors (Zed,
JetBrains, Neovim, Emacs) and Toad. `agent` answers the protocol's requests on the official SDK
(`agent-client-protocol`, imported as `acp`), one `core.Session` per ACP session; `updates` turns the
session's events into `session/update` notifications, the stop reason and the turn's usage; `stdio` is the
SDK's transport, stdout for the protocol alone, each line from the client checked first (`messages`).

It is named `acp_server`, not `acp`: the repository root is the package `hotloop`, and a folder `acp/` in it
would shadow the SDK's `acp` wherever the root is on `sys.path` (`python -m pytest` run from it).

It may import `core` and everything below it; never `tui` or `headless`, never Textual.
"""
