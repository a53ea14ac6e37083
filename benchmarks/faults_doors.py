"""The fault matrix's rows for the doors issue 34 closed; faults.py runs them after its own.

Hostile input at the doors the watch, the importers and ACP opened: deny rules against spellings
that run the same program, an imported or loaded session that names another workspace, JSON
nested past any parser's stack, a key the watch knows echoed back to it, and lines to
`hotloop acp` that are no request; and issue 35's switches and a Ctrl-C mid-stream. Every row checks
what the fault left on disk, in the log or in the output, not only how the run ended.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import faults_acp as acp
import faults_host as host
import faults_imports as imports
import faults_nesting as nesting
import faults_switching as switching
import faults_watch as watch
from faults import ANTHROPIC, DONE, Custom, Fault, Trial, mcp
from faults_acting import held, shell

Rows = list[Fault | Custom]

# ---- deny rules by meaning ----

# With `deny = ["run_shell:rm -rf *"]` and --yes, spellings of the matrix that deleted their folder
# (17 of 31), and more: each aims at its own folder vN, which must survive; each call says why it was refused.
SPELLINGS = (
    *("rm --rec --for v1", "/bin/r? -rf v2", "env -S 'rm -rf v3'", "flock L -c 'rm -rf v4'", "su -c 'rm -rf v5'"),
    *("unshare -r rm -rf v6", "alias x='rm -rf'\nx v7", "trap 'rm -rf v8' EXIT", "git -c alias.x='!rm -rf v9' x"),
    *("git -c core.fsmonitor='rm -rf v10' status", "xargs rm -rf <<< v11", "echo 'rm -rf v12' | sh"),
    *("sh <<EOF\nrm -rf v13\nEOF", "setpriv --reuid=0 rm -rf v14", "script -qc 'rm -rf v15' /dev/null"),
    *("runuser -u root -- rm -rf v16", "X=rm; $X -rf v17", "chroot / rm -rf v18", "cd v19 && rm *"),
)
# Code no deny rule can read: asked about, so headless refused, whatever --yes says.
UNREADABLE = (
    "python3 -c 'import shutil; shutil.rmtree(\"w1\")'",
    "perl -e 'system \"rm -rf w2\"'",
    "source ./wipe.sh w3",
    "bash ./wipe.sh w4",
    "awk 'BEGIN { system(\"rm -rf w5\") }'",
)
REFUSED = ("denied by the rule 'run_shell:rm -rf *'", "run_shell may run what a deny rule forbids (")


def targets(workspace: Path, root: Path) -> None:
    for n in range(1, len(SPELLINGS) + 1):
        (workspace / f"v{n}").mkdir()
    (workspace / f"v{len(SPELLINGS)}" / "-rf").touch()  # `rm *` in there is `rm -rf sub`
    (workspace / f"v{len(SPELLINGS)}" / "sub").mkdir()
    for n in range(1, len(UNREADABLE) + 1):
        (workspace / f"w{n}").mkdir()
    (workspace / "wipe.sh").write_text('rm -rf "$1"\n')


def all_survived(calls: int) -> Callable[[Trial], list[str]]:
    """Every folder is still there, and each of the row's `calls` said why it was refused."""

    def check(trial: Trial) -> list[str]:
        kept = [*(f"v{n}" for n in range(1, len(SPELLINGS) + 1)), f"v{len(SPELLINGS)}/sub"]
        kept += [f"w{n}" for n in range(1, len(UNREADABLE) + 1)]
        gone = [name for name in kept if not (trial.workspace / name).is_dir()]
        said = sum(trial.stderr.count(line) for line in REFUSED)
        problems = [f"deleted: {', '.join(gone)}"] if gone else []
        if said != calls:
            problems.append(f"{said} of {calls} calls said why they were refused")
        return held(problems, f"all {len(kept)} folders survive; each of the {calls} calls said why it was refused")

    return check


DENY: Rows = [
    Fault(
        f"deny rm -rf * with --yes: {len(SPELLINGS)} spellings by meaning",
        [shell(*SPELLINGS), DONE],
        ("--yes",),
        config='[approvals]\ndeny = ["run_shell:rm -rf *"]',
        expect=(1,),
        setup=targets,
        check=all_survived(len(SPELLINGS)),
    ),
    Fault(
        f"deny rm -rf * with --yes: {len(UNREADABLE)} calls of code it can't read",
        [shell(*UNREADABLE), DONE],
        ("--yes",),
        config='[approvals]\ndeny = ["run_shell:rm -rf *"]',
        expect=(1,),
        setup=targets,
        check=all_survived(len(UNREADABLE)),
    ),
]

# ---- imports and resumed workspaces ----

IMPORTS: Rows = [
    Fault(
        "resumed workspace: a transcript recorded in /, imported",
        [DONE] * imports.CLAUDE_STEPS + [imports.LOOK, DONE],
        ("-c",),
        prompt="look around",
        setup=imports.imported_in_root,
        check=imports.looked_from_here,
    ),
    Fault(
        "resumed workspace: a hotloop log edited to say /",
        [DONE, imports.LOOK, DONE],
        ("-c",),
        prompt="look around",
        setup=imports.own_log_in_root,
        check=imports.looked_from_here,
    ),
    imports.acp_load_row("resumed workspace: ACP session/load of a transcript in /"),
    imports.import_row("import: sessionId ../../X", imports.escaping_id, 0, imports.stayed_in_its_folder),
    imports.import_row("import: a FIFO as a transcript", imports.fifo, 1, imports.refused_as("a FIFO")),
    imports.import_row("import: a link to /dev/zero", imports.dev_zero, 1, imports.refused_as("a character device")),
    imports.import_row("import: Codex usage of 10^30", imports.huge_codex_usage, 0, imports.not_summed),
]

# ---- JSON nested past any parser ----

ARGUMENTS = {"name": "read_file", "arguments": nesting.nested(3000)}  # past the stack, under the size cap

NESTING: Rows = [
    Fault(
        "nested 100,000 deep: a chunk (chat)",
        [{"tool_calls": [nesting.LOOK]}, {"text": "x", "deep_json": nesting.DEEP}],
        expect=(1,),
        check=nesting.one_line(f"sent a malformed chunk ({nesting.SAID})"),
    ),
    Fault(
        "nested 100,000 deep: an event (responses)",
        [{"tool_calls": [nesting.LOOK]}, {"text": "x", "deep_json": nesting.DEEP}],
        ("--provider", "sim-responses"),
        expect=(1,),
        check=nesting.one_line(f"sent a malformed event ({nesting.SAID})"),
    ),
    Fault(
        "nested 100,000 deep: an event (anthropic)",
        [{"tool_calls": [nesting.LOOK]}, {"text": "x", "deep_json": nesting.DEEP}],
        ANTHROPIC,
        expect=(1,),
        check=nesting.one_line(f"sent a malformed event ({nesting.SAID})"),
    ),
    Fault(
        "nested 100,000 deep: a 400's body (anthropic)",
        [{"text": "x", "status": 400, "deep_json": nesting.DEEP}],
        ANTHROPIC,
        expect=(1,),
        check=nesting.one_line(f"answered 400: an error body {nesting.SAID}"),
    ),
    Fault(
        "nested 3,000 deep: tool-call arguments",
        [{"tool_calls": [ARGUMENTS]}, DONE],
        check=nesting.results_said(("read_file", "error", nesting.SAID)),
    ),
    Fault(
        "nested 100,000 deep: an MCP tool's answer, then echo",
        [
            {"tool_calls": [{"name": "deep", "arguments": {}}]},
            {"tool_calls": [{"name": "echo", "arguments": {"text": "still here"}}]},
            DONE,
        ],
        mcp("deep-json"),
        check=nesting.results_said(("deep", "error", nesting.SAID), ("echo", "ok", "still here")),
    ),
    Fault(
        "nested 100,000 deep: an MCP tool list",
        [DONE],
        mcp("deep-tool-list"),
        check=nesting.one_line(f"failed to start: the server's answer is JSON {nesting.SAID}"),
    ),
    Fault(
        "nested 100,000 deep: the config",
        [DONE],
        config="x = " + nesting.nested(),
        expect=(2,),
        check=nesting.one_line(f"config.toml: {nesting.SAID}"),
    ),
    Fault(
        "nested 100,000 deep: a dotted key in the config",
        [DONE],
        config=".".join(["a"] * nesting.DEEP) + " = 1",
        expect=(2,),
        check=nesting.one_line(f"config.toml: {nesting.SAID}"),
    ),
    Fault(
        "nested 100,000 deep: a line of a session log, continued",
        [DONE],
        ("-c",),
        setup=nesting.deep_log_line,
        check=nesting.deep_line_skipped,
    ),
    nesting.sim_serve_row("nested 100,000 deep: requests to sim serve"),
    nesting.sim_serve_row("nested 100,000 deep: requests to sim serve --replicas 2", "--replicas", "2"),
    nesting.sim_serve_row("nested 100,000 deep: requests to sim serve --processes 2", "--processes", "2"),
]

# ---- the watch: keys, sizes, dropped upstreams ----

WATCH: Rows = [
    watch.watch_row("watch: JSON nested 100,000 deep, three ways", watch.deep_everywhere, watch.nesting_said),
    watch.watch_row("watch: a key sent, echoed back and refused", watch.echoed_keys, watch.nowhere),
    watch.watch_row("watch: 30, 100 and 300 MB requests", watch.huge_requests, watch.kept_bounded),
    watch.watch_row("watch: the upstream drops mid-stream", watch.dropped, watch.drop_said),
]

# ---- hotloop acp ----

ACP: Rows = [*acp.ACP_ROWS]

# ---- the environment and the sandbox ----

HOST: Rows = host.ROWS

# ---- switching, and totals after a cancel ----

SWITCHING: Rows = switching.ROWS

# ---- compaction ----


def _failed_compaction_counted(trial: Trial) -> list[str]:
    """The prompts after a failed /compact ran, its failure is one line, and the log keeps it with its usage."""
    lines = trial.log.read_text().splitlines() if trial.log is not None else []
    turns = [json.loads(line)["prompt"] for line in lines if line.startswith('{"type":"turn_started"')]
    sides = [line for line in lines if line.startswith('{"type":"side_request"') and '"kind":"compaction"' in line]
    said = [line for line in trial.stderr.splitlines() if "compaction" in line]
    problems = [] if turns[:3] == ["first", "second", "third"] else [f"the turns logged: {turns}"]
    if len(sides) != 1 or '"outcome":"failed"' not in sides[0] or '"usage":{"prompt_total"' not in sides[0]:
        problems.append("the failed summary request is not logged once with its usage")
    if len(said) != 1 or "failed: the summary was cut off" not in said[0]:
        problems.append(f"said in {len(said)} lines, not one: {said}")
    return [*problems, "note: -c is cut off too: this row's config caps every answer at 8 tokens"]


COMPACTION: Rows = [
    Fault(
        "compaction: the summary cut off between prompts of hotloop run",
        [{"text": "hi"}] * 4,
        ("--provider", "tiny", "first", "/compact", "second"),
        prompt="third",
        config='[cache]\nprewarm = "off"\n[providers.tiny]\nkind = "sim-anthropic"\nmax_tokens = 8\n',
        expect=(1,),
        check=_failed_compaction_counted,
    ),
]

DOORS = [*DENY, *IMPORTS, *NESTING, *WATCH, *ACP, *HOST, *SWITCHING, *COMPACTION]
