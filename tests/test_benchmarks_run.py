"""Every script in `benchmarks/` still runs and prints the figures the README quotes from it: each at its smallest
setting in a process of its own (as the README runs it), or, where even that takes long, its cheapest real
measurement imported and run here. Nothing asserts how fast anything ran: these prove the scripts work, not the
figures."""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from hotloop.sim.embedded import EmbeddedSimulator

from support import communicated

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
RUN_SECONDS = 120  # each script's smallest run takes seconds; a hung one is killed, with its process group
pytestmark = [pytest.mark.timeout(RUN_SECONDS + 30), pytest.mark.benchmark_run]  # run by .ci/run, not `pytest`


def bench(script: str, *flags: str, cwd: Path) -> str:
    """`python benchmarks/SCRIPT FLAGS` in its own process group: its stdout, once it exited 0 with no traceback on
    stderr."""
    process = subprocess.Popen(
        [sys.executable, str(BENCHMARKS / script), *flags],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a timeout ends what the script started too (simulators, children, busy loops)
    )
    out, err = communicated(process, RUN_SECONDS)
    assert process.returncode == 0, f"{script} exited {process.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    return out


def module(name: str) -> ModuleType:
    """A benchmark, imported as the package's module (mypy leaves benchmarks/ out: its names are looked up at run
    time)."""
    return importlib.import_module(f"hotloop.benchmarks.{name}")


def test_every_benchmark_is_run_here() -> None:
    """Each script in benchmarks/ (a file that runs) has its test in this file; the modules the scripts share
    (faults_*.py, passthrough_ways.py) run in theirs: a new benchmark can't be left out of it."""
    here = Path(__file__).read_text()
    scripts = [path.stem for path in BENCHMARKS.glob("*.py") if 'if __name__ == "__main__":' in path.read_text()]
    assert "faults" in scripts
    missing = [name for name in scripts if f'"{name}.py"' not in here and f'module("{name}")' not in here]
    assert not missing, f"benchmarks with no test in {Path(__file__).name}: {missing}"


def test_keepalive(tmp_path: Path) -> None:
    """keepalive.py prices every trace for every policy and checks the targets, on 50 pauses a trace."""
    out = bench("keepalive.py", "--pauses", "50", cwd=tmp_path)
    assert "| trace | pauses | none | keepalive-1m |" in out
    for label in ("published mix", "adversarial: just past another's plan", "recorded (tests/fixtures)"):
        assert f"| {label} |" in out
    assert "oracle ✓" in out and "÷ oracle" in out


def test_parallel_tools(tmp_path: Path) -> None:
    """parallel_tools.py (it has no smaller setting: three ~1 s calls) times the tool phase in-process and with
    run_shell."""
    out = bench("parallel_tools.py", cwd=tmp_path)
    assert out.count("phase / slowest = ") == 2, out
    assert "in-process tool: 3 calls" in out and "run_shell, three processes: 3 calls" in out


def test_prefix_cache(tmp_path: Path) -> None:
    """prefix_cache.py reads each step's cache figures over the three protocols."""
    out = bench("prefix_cache.py", cwd=tmp_path)
    for protocol in ("openai API:", "openai-responses API:", "anthropic API:"):
        assert protocol in out
    assert out.count("cache-hit ") == 3 and "read − prev" in out


def test_helper_prefix(tmp_path: Path) -> None:
    """helper_prefix.py asks a title fresh and on the prefix, on its three servers, after both first turns."""
    out = bench("helper_prefix.py", cwd=tmp_path)
    for server in ("OpenAI API, vLLM prefix cache", "OpenAI API, one llama.cpp slot", "Anthropic API"):
        assert out.count(server) >= 2, server
    assert out.count("fresh ÷ prefix, computed: the title ") == 6
    assert "target, the title computes ≥ 5× fewer prompt tokens" in out


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_loop_overhead(tmp_path: Path, protocol: str) -> None:
    """loop_overhead.py, one round over each protocol: hotloop's own CPU per step, the full step and the bare SDK
    request."""
    out = bench("loop_overhead.py", "--rounds", "1", "--protocol", protocol, cwd=tmp_path)
    assert f"loop overhead ({protocol} protocol): 1 rounds" in out
    for figure in ("hotloop's own time (full step − bare SDK request): median", f"bare {protocol} SDK request"):
        assert figure in out, figure


def test_compaction(tmp_path: Path) -> None:
    """compaction.py on a 2-turn conversation: both compactions' prefill and timings, and the ratio."""
    out = bench("compaction.py", "--turns", "2", cwd=tmp_path)
    assert "(2 turns), simulator at sim-balanced's pace" in out
    for row in ("summary request", "next turn", "both"):
        assert any(line.startswith(row) for line in out.splitlines()), row
    assert "hotloop prefills " in out and "% of the naive tokens" in out


def test_session_log(tmp_path: Path) -> None:
    """session_log.py, 20 turns: the caller's cost per event and per turn, the writer thread against the sync log."""
    out = bench("session_log.py", "--turns", "20", "--rounds", "1", "--gap-ms", "0", cwd=tmp_path)
    for row in ("per event, sync", "per event, writer", "per turn, sync", "per turn, writer"):
        assert row in out
    assert "writer  caller" in out


def test_shell_reaper(tmp_path: Path) -> None:
    """shell_reaper.py, one run of each case: the first call and each command, with and without the subreaper."""
    out = bench("shell_reaper.py", "--runs", "1", cwd=tmp_path)
    assert "first call ('true'): median of 1" in out
    for command in ("'true': median of 1", "'sleep 0.2': median of 1"):
        assert command in out
    assert out.count("with the subreaper") >= 3 and "cost" in out


def test_sim_capacity(tmp_path: Path) -> None:
    """sim_capacity.py, one server process, 4 streams for 1 s: its table row, with no errors."""
    out = bench(
        "sim_capacity.py", "--processes", "1", "--streams", "4", "--seconds", "1", "--load-processes", "1", cwd=tmp_path
    )
    assert "| server processes | streams/s | tokens/s |" in out
    [row] = [line for line in out.splitlines() if line.startswith("| 1 |")]
    assert row.rstrip().endswith("| 0 |"), row  # errors


def test_fault_matrix_row(tmp_path: Path) -> None:
    """faults.py --only one row: the matrix (and every faults_*.py module, which its main imports) runs that row,
    prints its table and its verdicts. The rows themselves: `python benchmarks/faults.py`."""
    out = bench("faults.py", "--only", "503 every time", cwd=tmp_path)
    assert any(line.startswith("503 every time  held ") for line in out.splitlines()), out
    assert "1 of 1 faults held" in out
    assert "no traceback anywhere in the matrix" in out and "every check held" in out


def test_fault_modules_import() -> None:
    """Every faults_*.py module imports (faults.py imports them all before it picks its rows) and adds its rows."""
    sys.path.insert(0, str(BENCHMARKS))  # they import one another by their bare names, as faults.py runs them
    try:
        rows = {
            name: importlib.import_module(name) for name in sorted(path.stem for path in BENCHMARKS.glob("faults_*.py"))
        }
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert rows, "no faults_*.py"
    matrix = sys.modules["faults"]
    names = [fault.name for fault in [*matrix.FAULTS, *rows["faults_acting"].ACTING, *rows["faults_custom"].CUSTOM]]
    names += [fault.name for fault in rows["faults_doors"].DOORS]
    assert len(names) == len(set(names)), "two rows share a name"


def test_transport(tmp_path: Path) -> None:
    """transport.py --quick (a request or two per figure, one round): the three tables on both SDKs and the verdicts
    against docs/architecture.md's claims."""
    out = bench("transport.py", "--rounds", "1", "--quick", cwd=tmp_path)
    for table in ("(a) CPU per streamed request", "(b1) request building", "(b2) chunk parsing", "against the claims:"):
        assert table in out
    assert "typed create() given hotloop's JSON sends the same JSON: yes" in out
    for row in ("openai 40 messages (57 kB)", "anthropic 80 messages (116 kB)", "provider stream()"):
        assert row in out, row


def test_fleet_scale(tmp_path: Path) -> None:
    """fleet_scale.py at 5 agents on one simulator process: its row, checked against the server's own count."""
    out = bench("fleet_scale.py", "--agents", "5", "--processes", "1", cwd=tmp_path)
    assert "| agents | workers | ramp | requests |" in out
    [row] = [line for line in out.splitlines() if line.startswith("| 5 | 1 |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[9] == "0", row  # errors
    assert cells[11] == "yes", row  # the prompt tokens the agents were told = the server's /metrics delta


def test_transcript_stream(tmp_path: Path) -> None:
    """transcript_stream.py, one run of the paced 20k case in a fresh process: its figures and the targets."""
    out = bench("transcript_stream.py", "--runs", "1", "--cases", "20k paced", cwd=tmp_path)
    assert "20k paced: 20,000 tokens of history" in out
    for figure in ("tok/s: now", "latency p99: now", "last token: now", "heartbeat p99: now"):
        assert figure in out, figure
    assert "targets: heartbeat p99 ≤ 16 ms" in out


def test_transcript_designs(tmp_path: Path) -> None:
    """transcript_designs.py, hotloop's design, one round capped at 1 s of streaming at both paces: its tables."""
    out = bench("transcript_designs.py", "--rounds", "1", "--designs", "hotloop", "--cap", "1", cwd=tmp_path)
    assert "round 1 hotloop       paced:" in out and "round 1 hotloop unthrottled:" in out
    assert out.count("hotloop Transcript (design F)") == 2  # the medians and the ranges
    assert "median of 1 rounds" in out and "range over the rounds" in out


def test_watched_list(tmp_path: Path) -> None:
    """watched_list.py at 10 conversations: the list now and as commit b5f460a had it (the same rows), and one
    update against a8ae636's screen."""
    found = ["git", "-C", str(BENCHMARKS), "cat-file", "-e", "b5f460a^{commit}"]
    if shutil.which("git") is None or subprocess.run(found, capture_output=True).returncode != 0:
        pytest.skip("needs the repository's history: it compares with commits b5f460a and a8ae636")
    out = bench("watched_list.py", "--sizes", "10", "--update-sizes", "10", cwd=tmp_path)
    assert "b5f460a (rebuild)" in out and "now (row by row)" in out
    assert "same rows in the same order: yes" in out
    assert "a8ae636 (sums every total)" in out and "now (running totals)" in out


async def test_agent_latency_shipped(tmp_path: Path) -> None:
    """agent_latency.py takes 80 s at one round (eight configurations of a 9 s task, on top of the earlier sessions
    prefetch learns from): here the last two steps of its task (a fetch, then the answer) run as shipped through its
    own `run`, and yield the figures its table prints: wall, uncached prefill and cache hit."""
    bench_module = module("agent_latency")
    events = await bench_module.run("shipped", tmp_path, steps=bench_module.STEPS[-2:])
    wall, uncached, hit = bench_module.figures(events)
    assert wall > 0 and uncached > 0 and 0 < hit < 1


async def test_agent_latency_prewarm(tmp_path: Path) -> None:
    """agent_latency.py --prewarm-only takes 30 s at one round (eight new sessions): here one new session as hotloop
    opens it, the prompt sent while the pre-warm is at the server, through its own `first_step_ttft`; the pre-warm
    left the prefix in the cache for the first step."""
    ttft, read = await module("agent_latency").first_step_ttft("sim", "at once, left", tmp_path)
    assert ttft > 0 and read > 0


async def test_priority_lanes(tmp_path: Path) -> None:
    """priority_lanes.py takes 22 s at one round (three modes): here the lanes-on mode, through its own `one_round`:
    every step of every agent timed, and every title answered."""
    bench_module = module("priority_lanes")
    ttfts, last_title = await bench_module.one_round(tmp_path, "lanes on")
    assert len(ttfts) == bench_module.AGENTS * bench_module.STEPS
    assert last_title is not None


async def test_fleet(tmp_path: Path) -> None:
    """fleet.py takes 23 s at two agents (four configurations of four turns): here two agents on two replicas behind
    the prefix router, through its own `run`: every turn answered, the requests spread over the replicas it names."""
    bench_module = module("fleet")
    (tmp_path / "scenario.json").write_text(json.dumps(bench_module.steps()))
    result = await bench_module.run(2, 2, "prefix", tmp_path)
    assert len(result["served"]) == 2 and sum(result["served"]) == 2 * bench_module.TURNS * 3
    assert 0 < result["hit"] < 1 and result["uncached"] > 0 and result["ttft"] > 0


def test_startup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """startup.py takes about 3 minutes (5 rounds of hotloop in a terminal, and 15 first steps): here one of each
    of its measurements through its own functions: `hotloop --version`, the app painted and `● ready` in a tmux
    terminal, and a first step's TTFT in a child process."""
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux: startup.py times the app in a tmux terminal")
    bench_module = module("startup")
    monkeypatch.setenv("TMUX_TMPDIR", str(tmp_path))  # a tmux server of this test's own, whatever else runs one
    assert bench_module.version_time() > 0
    env = {"HOTLOOP_DATA_DIR": str(tmp_path), "HOTLOOP_CONFIG": str(tmp_path / "none.toml")}
    painted, ready = bench_module.screen_times(bench_module.hotloop(), env, ready=True)
    assert painted > 0 and ready is not None and ready >= painted
    (tmp_path / "ttft.toml").write_text('[cache]\nprewarm = "off"\n[routing]\ntitles = false\n[sim]\nttft_ms = 300\n')
    assert math.isfinite(bench_module.ttft_run({**env, "HOTLOOP_CONFIG": str(tmp_path / "ttft.toml")}))


def test_session_scale(tmp_path: Path) -> None:
    """session_scale.py --quick (20 sessions, the big one of 50 turns), one run: the listing, the big session opened
    from the app's sidebar (this waited forever once the main screen took over the sidebar's messages), its peak
    RSS, and both replays."""
    out = bench("session_scale.py", "--runs", "1", "--quick", cwd=tmp_path)
    assert "session scale: 20 sessions written" in out and "the big one has 50 turns" in out
    for figure in (
        "hotloop sessions list, 20 sessions: median",
        "open the 50-turn session from the app's sidebar, to its first frame: median",
        "until all of its items are rendered, in the background: median",
        "peak RSS of that process: median",
        "hotloop replay --speed 0 --headless: median",
        "replay at --speed 0 in the app, to drawn: median",
    ):
        assert figure in out, figure


def test_passthrough(tmp_path: Path) -> None:
    """passthrough.py --quick at its smallest (one round, 4 requests, no uvloop): every table, every way to the
    simulator in them, and the targets against the hop."""
    out = bench(
        "passthrough.py",
        "--quick",
        "--rounds",
        "1",
        "--requests",
        "4",
        "--no-uvloop",
        "--data",
        str(tmp_path),
        cwd=tmp_path,
    )
    for table in (
        "first byte, plain request",
        "first byte, 100 KB request",
        "whole answer, plain request",
        "each later chunk, lateness against a 2 ms pace",
        "32 concurrent streams",
        "256 concurrent streams",
        "CPU per request",
        "targets (the watch against the hop)",
    ):
        assert table in out, table
    for way in ("direct", "relay", "hop", "watch"):
        assert out.count(f"\n  {way} ") >= 6, way
    for way in ("relay", "hop", "watch"):
        assert re.search(rf"\n  {way} .*× the hop's   user [\d.]+  system [\d.]+  switches [\d.]+\n", out), way
    assert "watch: CPU per request ≤ 1.5× the hop's" in out


async def test_passthrough_instructions(tmp_path: Path, sim: EmbeddedSimulator) -> None:
    """passthrough_instructions.py counts four Pythons under valgrind (minutes; valgrind is seldom installed): here
    each way it counts, started by its own `--serve` in a process of its own (without valgrind), serves its own
    `load` of 8 requests from the simulator (a plain way and a 100 KB way, as `--big` counts), and stops on SIGTERM
    as the count needs."""
    bench_module = module("passthrough_instructions")
    script = str(bench_module.__file__)
    with contextlib.suppress(ValueError):  # it puts benchmarks/ on the path, whose bare names no other test wants
        sys.path.remove(str(Path(script).parent))
    for way, body in (("hop", bench_module.passthrough.PLAIN), ("watch", bench_module.passthrough.BIG)):
        command = [sys.executable, script, "--serve", way, sim.url, str(tmp_path)]
        server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:"), url
            await bench_module.load(url, 8, body)
            server.terminate()
            assert server.wait(timeout=RUN_SECONDS) == 0
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
    assert len(sim.server.requests) == 16
