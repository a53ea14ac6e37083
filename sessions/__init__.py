"""Sessions on disk: the append-only log (`log`, `masking`, `summary`), reading it back (`store`,
`projection`, `resume`), and what is made of it (`replay`, `export`, `waterfall`, `fork`, `caps`).

It may import `agent` and `providers` (the events it stores); never `config`, `core`, a frontend or Textual.
"""
