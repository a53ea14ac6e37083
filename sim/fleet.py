"""K simulated vLLM replicas behind one router, as a production stack serves a model.

Each replica is a whole `SimServer`: its own prefix cache, its own `max_running` batch and
its own metrics. The router listens on one port, answers `/v1/models`, `/health`, `/version`
and `/metrics` itself, and hands every other `/v1/*` POST to one replica's own handler, which
streams the answer back unchanged. Where a request goes decides what its replica has cached:

- `round-robin`: the next replica in turn, as a plain load balancer (a Kubernetes Service)
  spreads requests. A session's steps land on every replica, and each prefills again what
  another one holds.
- `affinity`: by the session key in a header (`x-session-id` unless told otherwise), as vLLM's
  production-stack router does with `--routing-logic session --session-key`. The key is
  hashed onto a replica by rendezvous hashing, so a replica added or removed moves only the
  sessions it takes or had. A request without the header goes to the least busy replica, as
  that router sends it to the one with the lowest QPS.
- `prefix`: to the replica whose prefix cache holds the longest prefix of the request's prompt,
  asked of the replicas' own caches (llm-d's prefix-cache scorer estimates the same from what
  it routed where), ties to the least busy. llm-d weighs that score against its load scorers,
  or a prefix every session shares (the system prompt) would pull every session onto the one
  replica that saw it first; here a replica busier than the least busy by more than
  `PREFIX_SLACK` requests is passed over.

"Busy" counts the requests the router has in flight at a replica, running or queued there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from hotloop.sim import anthropic_api, json_depth, openai_api, responses_api
from hotloop.sim.anthropic_api import AnthropicError
from hotloop.sim.defaults import AFFINITY_HEADER, ROUTERS
from hotloop.sim.embedded import EmbeddedServer
from hotloop.sim.engine import SimConfig, SimRequest
from hotloop.sim.openai_api import ApiError
from hotloop.sim.server import SimServer

# Requests a replica may have in flight beyond the least busy one and still win on its cached prefix.
PREFIX_SLACK = 4

# The prompt of a request as a replica reads it (a Responses request may continue a response only one replica
# stored); a request on any other path goes to the least busy replica.
_PROMPTS: Mapping[str, Callable[[Any, SimServer], SimRequest]] = {
    "/v1/chat/completions": lambda body, replica: openai_api.parse_chat(body).request,
    "/v1/responses": lambda body, replica: responses_api.parse_responses(body, replica.stored_responses).request,
    "/v1/messages": lambda body, replica: anthropic_api.parse_messages(body).request,
}


class Fleet:
    """`replicas` simulators with `config`, behind a router of the kind `router` names (one of ROUTERS)."""

    def __init__(
        self,
        config: SimConfig | None = None,
        replicas: int = 2,
        router: str = "round-robin",
        affinity_header: str = AFFINITY_HEADER,
    ) -> None:
        if router not in ROUTERS:
            raise ValueError(f"router must be one of {', '.join(ROUTERS)} (got {router!r})")
        if replicas < 1:
            raise ValueError(f"a fleet needs at least 1 replica (got {replicas})")
        self.replicas = [SimServer(config) for _ in range(replicas)]
        self.router = router
        self.affinity_header = affinity_header
        self.busy = [0] * replicas
        self._turn = 0
        self._apps = [replica.app() for replica in self.replicas]
        self.registry = CollectorRegistry()
        self.routed = Counter(
            "hotloop_router_requests",
            "Requests the router sent to each replica, by the decision that chose it.",
            ("replica", "decision"),
            registry=self.registry,
        )
        self.registry.register(_ReplicaMetrics(self.replicas))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/{path:.+}", self.forward)
        first = self.replicas[0]  # every replica serves the same models
        app.router.add_get("/v1/models", first.models)
        app.router.add_get("/health", first.health)
        app.router.add_get("/version", first.version)
        app.router.add_get("/metrics", self.metrics)
        return app

    async def forward(self, request: web.Request) -> web.StreamResponse:
        """The request served by the replica the router picks, on that replica's own route."""
        raw = await request.read()  # kept by aiohttp: the replica's handler reads the same bytes
        index, decision = self.pick(request.path, request.headers, raw)
        self.routed.labels(str(index), decision).inc()
        match = await self._apps[index].router.resolve(request)
        self.busy[index] += 1
        try:
            return await match.handler(request)
        finally:
            self.busy[index] -= 1

    def pick(self, path: str, headers: Mapping[str, str], raw: bytes) -> tuple[int, str]:
        """The replica for a request, and the decision that chose it (the router's metrics count both)."""
        if self.router == "affinity":
            key = headers.get(self.affinity_header)
            if key:
                return _rendezvous(key, len(self.replicas)), "session-key"
            return self._least_busy(range(len(self.replicas))), "no-session-key"
        if self.router == "prefix":
            return self._by_prefix(path, raw)
        index = self._turn % len(self.replicas)
        self._turn += 1
        return index, "round-robin"

    def _by_prefix(self, path: str, raw: bytes) -> tuple[int, str]:
        allowed = [n for n, busy in enumerate(self.busy) if busy <= min(self.busy) + PREFIX_SLACK]
        cached = [_cached_prefix(replica, path, raw) for replica in self.replicas]
        best = max(cached[n] for n in allowed)
        index = self._least_busy([n for n in allowed if cached[n] == best])
        if max(cached) > best:
            return index, "spilled"  # the replica holding more was too busy
        return index, "cached-prefix" if best else "least-busy"

    def _least_busy(self, replicas: Iterable[int]) -> int:
        return min(replicas, key=lambda n: self.busy[n])

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), content_type="text/plain", charset="utf-8")


def _cached_prefix(replica: SimServer, path: str, raw: bytes) -> int:
    """Prompt tokens of the request `replica` holds in its cache; 0 for a path without a prompt or a body it refuses."""
    parse = _PROMPTS.get(path)
    if parse is None:
        return 0
    try:
        return replica.engine.cached_prefix(parse(json_depth.loads(raw), replica))
    except (ValueError, ApiError, AnthropicError):
        return 0


def _rendezvous(key: str, replicas: int) -> int:
    """The replica whose hash with `key` is highest: stable for a key, and fair over keys."""
    return max(range(replicas), key=lambda n: hashlib.blake2b(f"{n}\0{key}".encode(), digest_size=8).digest())


class _ReplicaMetrics(Collector):
    """Every replica's vLLM series, each sample labelled with its replica's number."""

    def __init__(self, replicas: list[SimServer]) -> None:
        self.replicas = replicas

    def collect(self) -> Iterable[Metric]:
        return LabelledMetrics([replica.engine.metrics.registry.collect() for replica in self.replicas]).collect()


class LabelledMetrics(Collector):
    """Replicas' metric families as one exposition, each sample labelled with its replica's number."""

    def __init__(self, replicas: list[Iterable[Metric]]) -> None:
        self.replicas = replicas

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for n, families in enumerate(self.replicas):
            for family in families:
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                for sample in family.samples:
                    labels = {**sample.labels, "replica": str(n)}
                    into.add_sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar)
        return merged.values()


class EmbeddedFleet(EmbeddedServer):
    """A fleet on a loopback port, in a thread of its own, as `EmbeddedSimulator` serves one replica."""

    def __init__(
        self,
        config: SimConfig | None = None,
        replicas: int = 2,
        router: str = "round-robin",
        affinity_header: str = AFFINITY_HEADER,
    ) -> None:
        self.fleet = Fleet(config, replicas, router, affinity_header)
        super().__init__(self.fleet)
