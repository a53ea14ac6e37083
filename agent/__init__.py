"""The agent: the loop that asks the model (`loop`), the calls it runs (`tool_runner`, `tools/`), who may
let them run (`approvals`, `rules`, `command_line`, `runs`, `runners`, `carriers`, `hooks`), and what it
knows of its own steps (`step`, `recorder`, `step_fold`, `events`, `fingerprint`, `cache_explainer`,
`compaction`, `pricing`, `switching`, `memo`, `prefetch`).

It may import `providers` and the top-level modules that import nothing of hotloop (`paths`,
`secret_policy`, `struct_errors`, `nesting`); never `sessions`, `config`, `core`, a frontend or Textual.
"""
