"""Real Claude Code 2.1.332 and Codex 0.171.0 requests (recorded into tests/fixtures/agents/) through the watch's
reading and conversation grouping: each run is one conversation, its second request a step of the same turn
that returns the first one's tool results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hotloop.watch.lineage import Lineage
from hotloop.watch.wire import PROTOCOLS, agent_of, read_request

FIXTURES = Path(__file__).parent / "fixtures" / "agents"


def _recorded(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("name", "agent", "key"),
    [
        ("claude_code_2.1.332_requests.jsonl", "claude-cli/2.1.332", "x-claude-code-session-id:"),
        ("codex_0.171.0_requests.jsonl", "codex_exec/0.171.0", "session-id:"),
    ],
)
def test_each_recorded_run_is_one_conversation_whose_second_request_returns_tool_results(
    name: str, agent: str, key: str
) -> None:
    lineage = Lineage()
    conversations: dict[str, list[int]] = {}
    for number, recorded in enumerate(_recorded(name)):
        headers = {name.lower(): value for name, value in recorded["headers"].items()}
        request = read_request(PROTOCOLS[recorded["path"]], msgspec.json.encode(recorded["body"]), headers)
        assert agent_of(headers["user-agent"]) == agent
        assert request.session_key.startswith(key)
        segments = request.segments
        placed = lineage.place(request.session_key, segments.system, segments.messages, segments.roles)
        if recorded["index"] == 0:
            assert placed.continues == "" and placed.side_of == "", recorded["run"]
            assert request.prompt and not request.results
            conversation = recorded["run"]
        else:
            assert placed.continues == recorded["run"], recorded["run"]
            assert request.prompt is None and request.results
            conversation = placed.continues
        lineage.record(conversation, request.session_key, segments.system, segments.messages)
        conversations.setdefault(conversation, []).append(number)
    assert len(conversations) == 2 and all(len(numbers) == 2 for numbers in conversations.values())
