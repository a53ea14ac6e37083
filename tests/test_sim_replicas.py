"""`hotloop sim serve --processes P`: P simulators in P processes on one port (issue 39, item 5).

The server runs as a real subprocess in a session of its own, so a test can signal its whole process group as a
terminal's Ctrl-C does. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from hotloop.sim.embedded import start_on
from hotloop.sim.processes import Scraper

from support import alive, start_sim, wait_until

STREAMS = 24  # each its own client, so its own connection: all on one process has odds of 2 in 2^24
SERVE = [sys.executable, "-m", "hotloop", "sim", "serve", "--no-latency", "--processes", "2"]


class Served:
    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])

    def children(self) -> list[int]:
        """The pids of the server's child processes: its replicas and multiprocessing's resource tracker."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        return [int(pid) for pid in children]

    def replicas(self) -> list[int]:
        """The pids of the processes that serve."""
        return [pid for pid in self.children() if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def serve(*flags: str) -> Served:
    process = subprocess.Popen(
        [*SERVE, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stdout is not None
    banner = process.stdout.readline()  # the server prints it at once, or exits (and the line is empty)
    assert "2 processes, connections spread by the kernel" in banner, banner
    return Served(process, banner.split(" on ", 1)[1].split(" ", 1)[0].removesuffix("/v1"))


@pytest.fixture
def served() -> Iterator[Served]:
    server = serve("--port", "0")
    try:
        yield server
    finally:
        if server.process.poll() is None:
            os.killpg(server.process.pid, signal.SIGKILL)
        server.process.communicate(timeout=30)


async def metrics(url: str) -> dict[str, dict[str, float]]:
    """Each vLLM counter's total, per replica label, as one scrape of the shared port reads them."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as response:
        assert response.status == 200, await response.text()
        text = await response.text()
    totals: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_total"):
                by_replica = totals.setdefault(sample.name, {})
                replica = sample.labels["replica"]
                by_replica[replica] = by_replica.get(replica, 0.0) + sample.value
    return totals


async def stream(url: str, n: int) -> tuple[int, int]:
    """One streamed answer on a client of its own; the usage the server told it (prompt, completion)."""
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sim", max_retries=0) as client:
        chunks = await client.chat.completions.create(
            model="sim-fast",
            messages=[{"role": "user", "content": f"say {n} words about caches"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        usage = None
        async for chunk in chunks:
            usage = chunk.usage or usage
    assert usage is not None
    return usage.prompt_tokens, usage.completion_tokens


async def test_requests_spread_over_both_processes_and_the_metrics_sum_to_the_usage(served: Served) -> None:
    """Streams on separate connections land on both processes, and one scrape of the shared port reads both: summed
    over the replica label, the prompt and generation tokens equal what the clients were told in `usage`."""
    told = await asyncio.gather(*(stream(served.url, 20 + n) for n in range(STREAMS)))

    counted: dict[str, dict[str, float]] = {}

    async def all_counted() -> bool:
        counted.update(await metrics(served.url))
        return sum(counted.get("vllm:request_success_total", {}).values()) == STREAMS

    async def settled() -> None:
        while not await all_counted():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(settled(), 30)
    by_replica = counted["vllm:request_success_total"]
    assert sorted(by_replica) == ["0", "1"]
    assert all(requests > 0 for requests in by_replica.values()), by_replica
    assert sum(counted["vllm:prompt_tokens_total"].values()) == sum(prompt for prompt, _ in told)
    assert sum(counted["vllm:generation_tokens_total"].values()) == sum(completion for _, completion in told)
    assert len(served.replicas()) == 2


async def stopped_cleanly(served: Served) -> None:
    """The server exited 0 with nothing on stderr, nothing listens on its port, and its processes end."""
    assert len(served.replicas()) == 2
    children = served.children()
    await wait_until(lambda: served.process.poll() is not None, 30, "the server to exit")
    _, errors = served.process.communicate(timeout=30)
    assert (served.process.returncode, errors) == (0, "")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", served.port), timeout=5).close()
    await wait_until(lambda: not any(alive(pid) for pid in children), 30, "the processes to end")


async def test_sigterm_stops_every_process(served: Served) -> None:
    """SIGTERM to the server (as a service manager stops it) stops both processes and frees the port."""
    await stream(served.url, 5)
    served.process.send_signal(signal.SIGTERM)
    await stopped_cleanly(served)


async def test_ctrl_c_stops_every_process_without_a_traceback(served: Served) -> None:
    """Ctrl-C signals the terminal's whole process group, the processes too: all stop, quietly."""
    await stream(served.url, 5)
    os.killpg(served.process.pid, signal.SIGINT)
    await stopped_cleanly(served)


async def test_a_process_that_dies_stops_the_server_with_one_line(served: Served) -> None:
    """A process killed under the server: the server stops the other and says which one ended, in one line."""
    # The banner comes once the sockets are bound: a process just spawned may not have exec'd its program yet.
    await wait_until(lambda: len(served.replicas()) == 2, 30, "both processes to run")
    first, second = served.replicas()
    os.kill(first, signal.SIGKILL)
    await wait_until(lambda: served.process.poll() is not None, 30, "the server to exit")
    _, errors = served.process.communicate(timeout=30)
    assert served.process.returncode == 1
    assert errors.endswith("stopped (exit code -9); the others were stopped\n"), errors
    assert len(errors.splitlines()) == 1
    assert not alive(second)


async def test_the_processes_do_not_outlive_a_killed_server(served: Served) -> None:
    """The server killed outright (no cleanup of its own): its processes see their pipe end and stop."""
    children = served.children()
    served.process.kill()
    await wait_until(lambda: not any(alive(pid) for pid in children), 30, "the processes to end")


def test_a_port_in_use_is_one_line_even_when_its_holder_shares_ports(served: Served) -> None:
    """A second `--processes` server on the same port would join the first's SO_REUSEPORT group and take half its
    connections; it is refused, in one line."""
    second = subprocess.run([*SERVE, "--port", str(served.port)], capture_output=True, text=True, timeout=60)
    assert second.returncode == 2
    assert second.stderr.startswith(f"hotloop: cannot listen on 127.0.0.1:{served.port}: ")
    assert len(second.stderr.splitlines()) == 1


def test_processes_and_replicas_are_one_or_the_other() -> None:
    """A router's replicas share one process; asking for both is a usage error, not a silent choice."""
    both = subprocess.run([*SERVE, "--replicas", "2"], capture_output=True, text=True, timeout=60)
    assert (both.returncode, both.stderr.count("\n")) == (2, 1)
    assert "--processes and --replicas" in both.stderr


async def test_a_scrape_with_a_process_that_does_not_answer_is_a_503_never_a_partial_sum() -> None:
    """The shared port's `/metrics` reads every process's own; one that refuses makes the answer a 503 that names
    it, where summing the others would have passed a short count off as the server's."""
    refused = socket.create_server(("127.0.0.1", 0))
    dead = refused.getsockname()[1]
    refused.close()
    with start_sim() as live:
        app = web.Application()
        app.router.add_get("/metrics", Scraper([live.port, dead]).metrics)
        listening = socket.create_server(("127.0.0.1", 0))
        runner = await start_on(app, listening)
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{listening.getsockname()[1]}/metrics") as response,
            ):
                status, said = response.status, await response.text()
        finally:
            await runner.cleanup()
    assert status == 503
    assert said.startswith("replica 1 did not answer its /metrics: ") and said.count("\n") == 1
