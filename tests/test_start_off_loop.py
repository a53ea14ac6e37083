"""Start: what hotloop builds at start (SDK clients, their TLS contexts, the simulator) never runs on the event loop,
where it held the first request in flight (1.6 s in `ssl.create_default_context` under load, more with proxies)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType

import anthropic
import openai
import pytest

from hotloop.agent.events import AgentEvent, SessionTitled, SideRequest
from hotloop.config import load_config
from hotloop.core.session import Session, SessionOptions
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.transport import SdkProvider
from hotloop.sim.embedded import EmbeddedServer, EmbeddedSimulator

from support import wait_until

FAST = "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
PROXIES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")  # each adds a transport, and a TLS context, to every client
BUILDERS = {
    code.co_qualname: code
    for code in (
        SdkProvider.__init__.__code__,
        openai.AsyncOpenAI.__init__.__code__,
        anthropic.AsyncAnthropic.__init__.__code__,
        EmbeddedServer.start.__code__,
    )
}
CERTIFICATES = ("load_verify_locations", "set_default_verify_paths")  # what a new TLS context spends its time in


class Builds:
    """What this thread calls of BUILDERS and CERTIFICATES while installed (`sys.setprofile`: this thread only)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._codes = set(BUILDERS.values())

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in self._codes:
            self.seen.append(frame.f_code.co_qualname)
        elif event == "c_call" and getattr(arg, "__name__", "") in CERTIFICATES:
            self.seen.append(getattr(arg, "__name__", ""))

    def __enter__(self) -> Builds:
        self._previous = sys.getprofile()
        sys.setprofile(self)
        return self

    def __exit__(self, *_: object) -> None:
        sys.setprofile(self._previous)


def behind_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXIES:
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # the loopback servers are reached directly


async def test_no_client_is_built_on_the_event_loop_at_start(
    isolated_home: Path, workspace: Path, sim: EmbeddedSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six servers configured and every proxy variable set: opening the session, the start's pre-warm, its first turn
    (in flight while the switch menu's probes run), the probes and the title build every client, and the simulator,
    off the event loop's thread; the probes still list each server's models."""
    behind_proxies(monkeypatch)
    servers = "".join(f'[providers.local{n}]\nkind = "openai-chat"\nbase_url = "{sim.base_url}"\n' for n in range(6))
    (isolated_home / "config.toml").write_text(FAST + servers)
    events: list[AgentEvent] = []
    session = Session(load_config(), SessionOptions(provider="sim", workspace=workspace), events.append)
    session.prewarmer.delay = 0.0
    with Builds() as builds:
        try:
            await session.open()
            await wait_until(lambda: any(isinstance(e, SideRequest) for e in events), what="the pre-warm answered")
            finished = await session.turn("hello")
            options = await session.switch_options()
        finally:
            await session.close(grace=30)  # the title, on a helper of its own
    assert builds.seen == []
    assert finished.reason == "answer" and any(isinstance(e, SessionTitled) for e in events)
    listed = {o.title.split(" · ")[0] for o in options if o.title.startswith("model: local") and not o.unavailable}
    assert listed == {f"model: local{n}" for n in range(6)}


def test_clients_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Five clients behind three proxy variables load the certificate store once at most (the process's shared
    context), not once per client and proxy transport (twenty times)."""
    behind_proxies(monkeypatch)
    with Builds() as builds:
        for n in range(5):
            OpenAIChatProvider(ProviderOptions(name=f"local{n}", base_url="http://127.0.0.1:9/v1", api_key="k"))
    assert builds.seen.count("SdkProvider.__init__") == 5
    assert len([name for name in builds.seen if name in CERTIFICATES]) <= 1
