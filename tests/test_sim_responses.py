"""The embedded simulator speaks OpenAI's Responses API to the real `openai` SDK, and refuses what the API refuses."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import (
    EasyInputMessageParam,
    ResponseFunctionToolCallParam,
    ResponseIncludable,
    ResponseStreamEvent,
)
from openai.types.responses.response_input_item_param import FunctionCallOutput
from pydantic import TypeAdapter

from hotloop.sim.embedded import EmbeddedSimulator

from support import (
    close_clients,  # noqa: F401 (autouse: closes the SDK clients a test opens)
    sim_with_scenario,
)
from support import openai_client as client

READ_FILE: Any = {  # no "strict", as hotloop sends it: the SDK's FunctionToolParam requires one
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
ENCRYPTED: ResponseIncludable = "reasoning.encrypted_content"
USER: EasyInputMessageParam = {"role": "user", "content": "Read a.txt"}
CALL: ResponseFunctionToolCallParam = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "read_file",
    "arguments": '{"path": "a.txt"}',
}
OUTPUT: FunctionCallOutput = {"type": "function_call_output", "call_id": "call_1", "output": "A"}
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
Scripted = Callable[[list[dict[str, Any]]], EmbeddedSimulator]


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Scripted]:
    """Starts a simulator (no latency) that follows the given scenario steps; stops it after the test."""
    started: list[EmbeddedSimulator] = []

    def start(steps: list[dict[str, Any]]) -> EmbeddedSimulator:
        started.append(sim_with_scenario(tmp_path, steps))
        return started[-1]

    yield start
    for sim in started:
        sim.stop()


def invalid(message: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"message": message, "type": "invalid_request_error", "param": param, "code": code}


REFUSED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "model is required": (
        {"input": "hi"},
        invalid("Missing required parameter: 'model'.", "model", "missing_required_parameter"),
    ),
    "an unknown model": (
        {"model": "gpt-9", "input": "hi"},
        invalid("The requested model 'gpt-9' does not exist.", "model", "model_not_found"),
    ),
    "an unknown parameter": (
        {"model": "sim-fast", "input": "hi", "extra_body": {"messages": []}},
        invalid("Unknown parameter: 'messages'.", "messages", "unknown_parameter"),
    ),
    "a parameter of the wrong type": (
        {"model": "sim-fast", "input": {"role": "user", "content": "hi"}},
        invalid(
            "Invalid type for 'input': expected one of a string or array of input items, but got an object instead.",
            "input",
            "invalid_type",
        ),
    ),
    "a Chat Completions tool": (
        {"model": "sim-fast", "input": "hi", "tools": [{"type": "function", "function": READ_FILE}]},
        invalid("Missing required parameter: 'tools[0].name'.", "tools[0].name", "missing_required_parameter"),
    ),
    "a tool without parameters": (
        {"model": "sim-fast", "input": "hi", "tools": [{"type": "function", "name": "read_file"}]},
        invalid(
            "Missing required parameter: 'tools[0].parameters'.", "tools[0].parameters", "missing_required_parameter"
        ),
    ),
    "an output without its call": (
        {"model": "sim-fast", "input": [USER, OUTPUT]},
        invalid("No tool call found for function call output with call_id call_1.", "input", None),
    ),
    "an output before its call": (
        {"model": "sim-fast", "input": [USER, OUTPUT, CALL]},
        invalid("No tool call found for function call output with call_id call_1.", "input", None),
    ),
    "a call without its output": (
        {"model": "sim-fast", "input": [USER, CALL, {"role": "user", "content": "go on"}]},
        invalid("No tool output found for function call call_1.", "input", None),
    ),
    "an unknown role": (
        {"model": "sim-fast", "input": [{"role": "bot", "content": "hi"}]},
        invalid(
            "Invalid value: 'bot'. Supported values are: 'user', 'system', 'developer', and 'assistant'.",
            "input[0].role",
            "invalid_value",
        ),
    ),
    "an assistant's input_text": (
        {"model": "sim-fast", "input": [USER, {"role": "assistant", "content": [{"type": "input_text", "text": "A"}]}]},
        invalid(
            "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'.",
            "input[1].content[0].type",
            "invalid_value",
        ),
    ),
    "forged encrypted reasoning": (
        {
            "model": "sim-fast",
            "input": [
                USER,
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "bm90IG1pbmU=.c2lnbmVk"},
                {"role": "assistant", "content": "A"},
                {"role": "user", "content": "and b.txt?"},
            ],
        },
        invalid("The encrypted content for item rs_1 could not be verified.", None, "invalid_encrypted_content"),
    ),
    "a reasoning item never stored": (
        {"model": "sim-fast", "input": [USER, {"type": "reasoning", "id": "rs_1", "summary": []}]},
        invalid(
            "Item with id 'rs_1' not found. Items are not persisted when `store` is set to false. "
            "Try again with `store` set to true, or remove this item from your input.",
            "input",
            None,
        ),
    ),
    "an unknown previous response": (
        {"model": "sim-fast", "input": "hi", "previous_response_id": "resp_nope"},
        invalid(
            "Previous response with id 'resp_nope' not found.", "previous_response_id", "previous_response_not_found"
        ),
    ),
    "max_output_tokens below 16": (
        {"model": "sim-fast", "input": "hi", "max_output_tokens": 8},
        invalid(
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 8 instead.",
            "max_output_tokens",
            "integer_below_min_value",
        ),
    ),
}
NOT_FOUND = {"a reasoning item never stored", "an unknown previous response"}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_requests_the_api_refuses_are_refused_with_its_error(sim: EmbeddedSimulator, case: str) -> None:
    request, body = REFUSED[case]
    with pytest.raises(openai.APIStatusError) as refused:
        await client(sim).responses.create(**request)
    assert refused.value.status_code == (404 if case in NOT_FOUND else 400)
    assert refused.value.body == body


async def test_a_tool_loop_sending_its_items_back_reads_its_history_from_the_cache(scripted: Scripted) -> None:
    steps = [
        {
            "reasoning": f"Part {n} is next; read it.",
            "tool_calls": [{"name": "read_file", "arguments": {"path": f"{n}.txt"}}],
        }
        for n in range(1, 5)
    ]
    api = client(scripted([*steps, {"reasoning": "All four are read.", "text": "The parts say A B C D."}]))
    items: list[Any] = [{"role": "user", "content": "Read the four parts."}]
    previous = None
    for _ in range(5):
        response = await api.responses.create(
            model="sim-fast",
            instructions="You read files.",
            input=items,
            tools=[READ_FILE],
            include=[ENCRYPTED],
            store=False,
        )
        usage = response.usage
        assert usage is not None
        if previous is not None:
            cached = usage.input_tokens_details.cached_tokens
            assert cached >= previous.input_tokens - 32
            # The reasoning went back where the model wrote it, so the whole previous output is cached too.
            assert cached >= previous.input_tokens + previous.output_tokens - 16
        items += [item.to_dict() for item in response.output]  # verbatim, encrypted_content and all
        items += [
            {"type": "function_call_output", "call_id": item.call_id, "output": f"contents of {item.arguments}"}
            for item in response.output
            if item.type == "function_call"
        ]
        previous = usage
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output_text == "The parts say A B C D."
    assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens > 0


async def test_encrypted_reasoning_verifies_only_as_it_was_sent(scripted: Scripted) -> None:
    api = client(scripted([{"reasoning": "The answer is short.", "text": "A."}, {"text": "B."}]))
    first = await api.responses.create(model="sim-fast", input=[USER], include=[ENCRYPTED], store=False)
    # JSON a client sends back as it got it (or tampered with): no param type of the SDK's describes it.
    replayed: list[Any] = [item.to_dict() for item in first.output]
    reasoning, message = replayed
    follow_up: EasyInputMessageParam = {"role": "user", "content": "And b.txt?"}

    second = await api.responses.create(model="sim-fast", input=[USER, reasoning, message, follow_up])
    assert second.output_text == "B."
    _, signature = reasoning["encrypted_content"].split(".")
    forged: Any = {
        **reasoning,
        "encrypted_content": base64.b64encode(b"The answer is long.").decode() + "." + signature,
    }
    with pytest.raises(openai.BadRequestError) as refused:
        await api.responses.create(model="sim-fast", input=[USER, forged, message, follow_up])
    assert refused.value.body == invalid(
        f"The encrypted content for item {reasoning['id']} could not be verified.", None, "invalid_encrypted_content"
    )
    # Made with store: false, the item is not kept either: without its encrypted_content it is unknown.
    bare: Any = {key: value for key, value in reasoning.items() if key != "encrypted_content"}
    with pytest.raises(openai.NotFoundError, match=f"Item with id '{reasoning['id']}' not found"):
        await api.responses.create(model="sim-fast", input=[USER, bare, message, follow_up])


async def test_previous_response_id_continues_a_stored_response(scripted: Scripted) -> None:
    api = client(
        scripted(
            [
                {"reasoning": "Read it first.", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
                {"text": "It says A."},
            ]
        )
    )
    first = await api.responses.create(model="sim-fast", input="Read a.txt", tools=[READ_FILE])
    [call] = [item for item in first.output if item.type == "function_call"]
    with pytest.raises(openai.BadRequestError, match=f"No tool output found for function call {call.call_id}."):
        await api.responses.create(model="sim-fast", previous_response_id=first.id, input="go on", tools=[READ_FILE])

    output: FunctionCallOutput = {"type": "function_call_output", "call_id": call.call_id, "output": "A"}
    second = await api.responses.create(
        model="sim-fast", previous_response_id=first.id, input=[output], tools=[READ_FILE]
    )
    assert second.output_text == "It says A."  # the scenario's second step: the stored turn came first
    assert second.previous_response_id == first.id
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens + first.usage.output_tokens - 16
    # A stored reasoning item can come back by its id alone.
    replayed: list[Any] = [item.to_dict() for item in first.output]  # JSON, as a client sends it back
    reasoning = replayed[0]
    assert "encrypted_content" not in reasoning
    third = await api.responses.create(
        model="sim-fast", input=[USER, reasoning, replayed[1], output], tools=[READ_FILE]
    )
    assert third.output_text == "It says A."


async def test_a_response_made_without_store_cannot_be_continued(sim: EmbeddedSimulator) -> None:
    api = client(sim)
    unstored = await api.responses.create(model="sim-fast", input="hello", store=False)
    with pytest.raises(openai.NotFoundError) as missing:
        await api.responses.create(model="sim-fast", input="again", previous_response_id=unstored.id)
    assert missing.value.body == invalid(
        f"Previous response with id '{unstored.id}' not found.", "previous_response_id", "previous_response_not_found"
    )


async def streamed(api: openai.AsyncOpenAI, **request: Any) -> list[Any]:
    """The SDK's typed stream's events, each checked against the SDK's own event models."""
    async with api.responses.stream(**request) as stream:
        events = [event async for event in stream]
    for event in events:
        # warnings=False: the SDK's parsed response types are not members of its own output union when dumped.
        EVENTS.validate_python(event.to_dict(warnings=False))
    assert [event.sequence_number for event in events] == list(range(len(events)))
    return events


def kinds(events: list[Any]) -> list[str]:
    """Event types, each run of one type (the deltas) as one."""
    return [kind for kind, _ in itertools.groupby(event.type for event in events)]


async def test_a_reasoning_and_text_answer_streams_in_the_api_order(scripted: Scripted) -> None:
    api = client(scripted([{"reasoning": "Say hello back.", "text": "Hello there, friend."}]))
    events = await streamed(
        api, model="sim-fast", input="hello", reasoning={"effort": "low", "summary": "auto"}, include=[ENCRYPTED]
    )

    assert kinds(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1].response
    reasoning, message = final.output
    assert [part.text for part in reasoning.summary] == ["Say hello back."]
    assert reasoning.encrypted_content and reasoning.id.startswith("rs_")
    deltas = [event for event in events if event.type == "response.output_text.delta"]
    assert "".join(event.delta for event in deltas) == final.output_text == "Hello there, friend."
    assert {(event.item_id, event.output_index, event.content_index) for event in deltas} == {(message.id, 1, 0)}
    assert (
        final.status == "completed" and final.usage.output_tokens > final.usage.output_tokens_details.reasoning_tokens
    )


async def test_function_calls_stream_as_items_with_their_arguments(scripted: Scripted) -> None:
    calls = [{"name": "read_file", "arguments": {"path": name}} for name in ("a.txt", "b.txt")]
    api = client(scripted([{"reasoning": "Both files, at once.", "tool_calls": calls}]))
    events = await streamed(api, model="sim-fast", input="read both", tools=[READ_FILE], include=[ENCRYPTED])

    per_call = [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    # Without a summary asked for, the reasoning is only its item, with its encrypted_content.
    reasoning = ["response.output_item.added", "response.output_item.done"]
    assert kinds(events) == [
        "response.created",
        "response.in_progress",
        *reasoning,
        *per_call * 2,
        "response.completed",
    ]
    assert events[3].item.encrypted_content
    done = [event for event in events if event.type == "response.function_call_arguments.done"]
    assert [event.arguments for event in done] == ['{"path": "a.txt"}', '{"path": "b.txt"}']
    items = events[-1].response.output[1:]
    assert [(item.type, item.status, item.name) for item in items] == [("function_call", "completed", "read_file")] * 2
    assert all(item.id.startswith("fc_") and item.call_id.startswith("call_") for item in items)
    assert [event.item_id for event in done] == [item.id for item in items]


async def test_max_output_tokens_ends_the_stream_incomplete(scripted: Scripted) -> None:
    api = client(scripted([{"text": "word " * 100}]))
    events = await streamed(api, model="sim-fast", input="talk", max_output_tokens=16)

    assert kinds(events)[-3:] == ["response.content_part.done", "response.output_item.done", "response.incomplete"]
    final = events[-1].response
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert final.output[0].status == "incomplete" and final.usage.output_tokens == 16


async def test_a_scenario_error_fails_the_stream_after_its_text(scripted: Scripted) -> None:
    api = client(scripted([{"text": "Partly there", "error": "overloaded_error"}]))
    events = await streamed(api, model="sim-fast", input="talk")

    assert kinds(events)[-2:] == ["response.output_item.done", "response.failed"]
    final = events[-1].response
    assert final.status == "failed" and (final.error.code, final.error.message) == ("server_error", "Overloaded")
    assert final.output[0].content[0].text == "Partly there"


async def test_a_status_fault_refuses_before_any_event(scripted: Scripted) -> None:
    api = client(scripted([{"status": 429, "retry_after": 2, "text": "never sent"}]))
    with pytest.raises(openai.RateLimitError) as refused:
        await api.responses.create(model="sim-fast", input="hi", stream=True)
    assert refused.value.response.headers["retry-after"] == "2"
