"""How many agents one bench worker holds, and what a second worker adds (issue 39, item 4).

The server is `hotloop sim serve --processes P` in processes of its own, with the balanced
tier's pacing (120 ms to the first token, then 100 tokens a second, each token its own write)
and batching off, so the server answers every agent at once and whatever slows a level down
is the client (or, on a small machine, the simulator's own CPU: `benchmarks/sim_capacity.py`).

- `--agents 100,250,500,1000`: `hotloop bench --agents N --json` in a process of its own (one
  worker: the agents in its one event loop), level by level, stopping after the first level
  whose client overhead passes `--limit-ms`. The overhead is the bench's own figure: how late
  its event loop's heartbeat woke at p99 (every timestamp the client takes waits that long).
- `--workers 1,2`: the same bench with `--workers W` at `--at` agents (Ray, `hotloop[fleet]`),
  for what a second worker adds on the same machine.

Each row checks the bench against the server: the prompt tokens the agents were told in
`usage` equal the server's `/metrics` delta. The ramp is the level's own: its agents arrive evenly
over its first second (`ramp_s`, longer where the client falls behind); requests/s count it in the
level's time.

    python benchmarks/fleet_scale.py [--agents 100,250,500,1000] [--limit-ms 1] [--processes 2]
    python benchmarks/fleet_scale.py --workers 1,2 --at 500
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim_capacity import serve

CONFIG = '[routing]\ntitles = false\n[providers.sim]\nkind = "openai"\nbase_url = "{url}/v1"\ndefault_model = "sim-balanced"\n'


def bench(home: Path, agents: int, workers: int = 1) -> dict[str, Any]:
    """One `hotloop bench` level as JSON, from a process of its own."""
    command = [sys.executable, "-m", "hotloop", "bench", "--provider", "sim", "--agents", str(agents), "--json"]
    if workers > 1:
        command += ["--workers", str(workers)]
    env = {**os.environ, "HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data")}
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if run.returncode != 0:
        raise SystemExit(f"hotloop bench --agents {agents} failed: {run.stderr.strip()}")
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def row(result: dict[str, Any], workers: int) -> str:
    (level,) = result["levels"]
    client, server = level["client"], level["server"]
    steps_per_s = level["steps"] / level["wall_s"]
    exact = "yes" if server["prompt_tokens"] == level["prompt_tokens"] else f"no ({server['prompt_tokens']})"
    return (
        f"| {level['agents']:,} | {workers} | {level['ramp_s']:.2f} s | {level['steps']:,} | {steps_per_s:,.0f} | "
        f"{_ms(client['loop_lag_p99_ms'])} | {_ms(client['cpu_ms_per_request'])} | {_ms(client['ttft_gap_ms'])} | "
        f"{level['ttft_s']['p99']:.2f} s | {level['errors']} | {level['prompt_tokens']:,} | {exact} |"
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="100,250,500,1000", help="the ramp, one worker (default %(default)s)")
    parser.add_argument("--limit-ms", type=float, default=1.0, help="client overhead p99 to stay under")
    parser.add_argument("--processes", type=int, default=2, help="simulator processes (default %(default)s)")
    parser.add_argument("--workers", help="compare these worker counts (e.g. 1,2) at --at agents instead")
    parser.add_argument("--at", type=int, default=500, help="agents for --workers (default %(default)s)")
    args = parser.parse_args()
    server, url = serve(args.processes)
    try:
        with tempfile.TemporaryDirectory() as folder:
            home = Path(folder)
            (home / "config.toml").write_text(CONFIG.format(url=url))
            print(f"{os.cpu_count()} cores; simulator: {args.processes} processes at {url}\n")
            print(
                "| agents | workers | ramp | requests | requests/s | client loop late p99 | client CPU a request "
                "| client TTFT gap | TTFT p99 | errors | prompt tokens | = server's |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|---|---|")
            if args.workers:
                for workers in (int(w) for w in args.workers.split(",")):
                    print(row(bench(home, args.at, workers), workers), flush=True)
                return
            for agents in (int(n) for n in args.agents.split(",")):
                result = bench(home, agents)
                print(row(result, 1), flush=True)
                lag = result["levels"][0]["client"]["loop_lag_p99_ms"]
                if lag is not None and lag > args.limit_ms:
                    print(f"\nover {args.limit_ms:g} ms at {agents:,} agents: stopped")
                    break
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
