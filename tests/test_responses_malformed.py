"""The Responses provider survives any event: every field it reads, given each wrong JSON type, in the parser
alone and over real loopback HTTP to the real `openai` SDK, is one warning naming the event (or, where the
response can't go on, one clear StreamInterrupted line), never an uncaught exception."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.errors import ProviderError
from hotloop.providers.events import Finished, ModelEvent, ProviderWarning, StreamStarted, ToolCallReady
from hotloop.providers.openai_responses import OpenAIResponsesProvider, ResponsesParser

from support import serving

USAGE = {
    "input_tokens": 39,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 16,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 55,
}
CALL = {"id": "fc_1", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": "c1", "name": "f"}
ARGUMENTS = '{"country":"France"}'


def response(status: str, **fields: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": [], "usage": USAGE, **fields}


# A response with every kind of event the parser reads: reasoning, text, a function call.
BODY: list[dict[str, Any]] = [
    {"type": "response.created", "sequence_number": 0, "response": response("in_progress", usage=None)},
    {"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning"}},
    {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "summary_index": 0, "delta": "Think."},
    {
        "type": "response.output_item.done",
        "output_index": 0,
        "item": {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA=="},
    },
    {"type": "response.output_item.added", "output_index": 1, "item": {"id": "msg_1", "type": "message"}},
    {"type": "response.output_text.delta", "item_id": "msg_1", "content_index": 0, "delta": "Paris."},
    {"type": "response.output_item.added", "output_index": 2, "item": CALL},
    {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": ARGUMENTS},
    {"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": ARGUMENTS},
    {"type": "response.output_item.done", "output_index": 2, "item": {**CALL, "arguments": ARGUMENTS}},
]
COMPLETED: dict[str, Any] = {"type": "response.completed", "response": response("completed")}
# Endings after which the stream can't go on: each substitution must end it with one clear line.
FAILING: list[dict[str, Any]] = [
    {"type": "response.failed", "response": response("failed", usage=None, error={"code": "x", "message": "boom"})},
    {"type": "error", "code": "server_error", "message": "boom", "param": None},
]
INCOMPLETE: dict[str, Any] = {
    "type": "response.incomplete",
    "response": response("incomplete", incomplete_details={"reason": "max_output_tokens"}),
}
# The fields the parser reads in an event it reads; any other field, and any field of an event it doesn't read
# (`response.created`), may be anything without a word.
READ = {
    *("delta", "item_id", "arguments", "item", "response", "message", "code"),
    *("item.type", "item.id", "item.call_id", "item.name", "item.arguments"),
    *("response.id", "response.status", "response.usage", "response.incomplete_details"),
}
NULL_ALLOWED = {"code", "item.arguments", "response.usage", "response.incomplete_details"}
READ_EVENTS = {event["type"] for event in [*BODY[1:], COMPLETED, INCOMPLETE, *FAILING]}
WRONG: dict[str, Any] = {"string": "x", "number": 7, "list": [1], "null": None, "object": {"k": 1}}


def json_type(value: object) -> str:
    kinds = {str: "string", int: "number", float: "number", list: "list", dict: "object", type(None): "null"}
    return "boolean" if isinstance(value, bool) else kinds[type(value)]


@dataclass(frozen=True)
class Case:
    stream: tuple[str, ...]  # each event's JSON
    kind: str  # the type of the event changed
    path: str  # the field changed ("" for the whole event)
    wrong: str  # the JSON type it was given
    ending: str  # the original stream's last event type

    @property
    def read(self) -> bool:
        return (
            self.kind in READ_EVENTS and self.path in READ and not (self.wrong == "null" and self.path in NULL_ALLOWED)
        )


def paths(event: dict[str, Any]) -> Iterator[str]:
    """Every field of an event, two levels deep (`item.id`), three in a response (`response.usage.input_tokens`)."""
    for key, value in event.items():
        yield key
        if isinstance(value, dict):
            for inner, deeper in value.items():
                yield f"{key}.{inner}"
                if key == "response" and isinstance(deeper, dict):
                    yield from (f"{key}.{inner}.{leaf}" for leaf in deeper)


def substituted(event: dict[str, Any], path: str, value: object) -> object:
    if not path:
        return value
    changed = copy.deepcopy(event)
    *parents, last = path.split(".")
    holder = changed
    for key in parents:
        holder = holder[key]
    holder[last] = value
    return changed


def cases() -> Iterator[Case]:
    streams = [[*BODY, COMPLETED], [*BODY, INCOMPLETE], *([*BODY, ending] for ending in FAILING)]
    for stream in streams:
        # The body's events are changed once, in the stream that completes; each ending in its own stream.
        positions = range(len(stream)) if stream[-1] is COMPLETED else [len(stream) - 1]
        for position in positions:
            event = stream[position]
            for path in ["", *paths(event)]:
                for name, value in WRONG.items():
                    if path and json_type(_at(event, path)) == name:
                        continue
                    changed = [*stream[:position], substituted(event, path, value), *stream[position + 1 :]]
                    yield Case(tuple(json.dumps(e) for e in changed), event["type"], path, name, stream[-1]["type"])


def _at(event: dict[str, Any], path: str) -> object:
    value: Any = event
    for key in path.split("."):
        value = value[key]
    return value


Outcome = tuple[list[ModelEvent], str | None]


def parsed(case: Case, where: str) -> Outcome:
    parser, events = ResponsesParser(where=where), []
    try:
        for data in case.stream:
            events += parser.feed(data.encode())
        events += parser.finish()
    except ProviderError as error:
        return events, str(error)
    return events, None


async def streamed(provider: OpenAIResponsesProvider, served: list[bytes]) -> Outcome:
    events: list[ModelEvent] = []
    request = ChatRequest(system="", tools=(), messages=(UserMessage("hi"),))
    try:
        async for event in provider.stream(request):
            if not isinstance(event, StreamStarted):
                events.append(event)
    except ProviderError as error:
        return events, str(error)
    return events, None


def problems_with(case: Case, outcome: Outcome) -> list[str]:
    """What the outcome of `case` gets wrong."""
    events, error = outcome
    warnings = [event.message for event in events if isinstance(event, ProviderWarning)]
    problems = []
    if error is not None and "\n" in error:
        problems.append(f"an error of more than one line: {error!r}")
    if case.ending != "response.completed" and case.ending != "response.incomplete":
        return problems if error is not None else [*problems, "a failed response ended without an error"]
    if case.path in ("", "type"):
        if not [w for w in warnings if "sent an unreadable event" in w]:
            problems.append(f"no warning of an unreadable event: {warnings}")
        if error is not None and case.kind != case.ending:
            problems.append(f"the stream ended: {error}")
    elif case.read:
        if len([w for w in warnings if f" {case.kind} event " in w]) != 1:
            problems.append(f"not one warning naming {case.kind}: {warnings}")
        if error is not None or not any(isinstance(event, Finished) for event in events):
            problems.append(f"the response did not go on to its end: {error}")
    elif warnings or error is not None:
        problems.append(f"a field the parser doesn't read changed what it said: {warnings} {error}")
    # One event changed, the call still arrives by another (its item, its arguments, their ends): once, whole.
    ready = [(event.call_id, event.name, event.arguments) for event in events if isinstance(event, ToolCallReady)]
    if error is None and ready != [("c1", "f", ARGUMENTS)]:
        problems.append(f"the call was not ready once, whole: {ready}")
    return problems


def without_times(outcome: Outcome) -> Outcome:
    events, error = outcome
    return [msgspec.structs.replace(event, ts=0.0) for event in events], error


async def test_every_field_of_every_event_read_given_each_wrong_type_is_one_warning_or_one_clear_error() -> None:
    """Some 450 streams: the parser alone and the provider over loopback HTTP say the same, and say it well."""
    served: list[bytes] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        await answer.write(b"".join(served))
        await answer.write_eof()
        return answer

    app = web.Application()
    app.router.add_post("/v1/responses", handler)
    failures: list[str] = []
    count = 0
    async with serving(app) as base_url:
        provider = OpenAIResponsesProvider(ProviderOptions(name="fixture", model="m", base_url=base_url, max_retries=0))
        try:
            for case in cases():
                count += 1
                served[:] = [b"data: " + data.encode() + b"\n\n" for data in case.stream]
                alone, over_http = parsed(case, provider.where), await streamed(provider, served)
                said = [
                    f"{case.kind} {case.path or '(whole)'} as {case.wrong}: {p}" for p in problems_with(case, alone)
                ]
                if without_times(alone) != without_times(over_http):
                    said.append(f"{case.kind} {case.path} as {case.wrong}: HTTP said otherwise: {over_http}")
                failures += said
        finally:
            await provider.aclose()
    assert count > 400
    assert not failures, f"{len(failures)} of {count} cases:\n" + "\n".join(failures[:20])


def test_the_shapes_that_raised_are_each_one_warning_that_names_the_event() -> None:
    """A string `item`, a reasoning item with no `type`, a string `usage`, `incomplete_details` and `error`."""
    reasoning = {"type": "response.output_item.done", "item": {"id": "rs_1", "summary": []}}
    stream = [
        {"type": "response.output_item.added", "item": "fc_1"},
        reasoning,
        {"type": "response.output_text.delta", "delta": "Hi."},
        {"type": "response.incomplete", "response": response("incomplete", usage="lots", incomplete_details="cut")},
    ]
    parser = ResponsesParser(where="p")
    events = [event for data in stream for event in parser.feed(json.dumps(data).encode())]
    warnings = [event.message for event in events if isinstance(event, ProviderWarning)]
    assert warnings == [
        "p sent a malformed response.output_item.added event (`item`: expected `object`, got `str`); "
        "hotloop skipped what it couldn't read",
        "p sent a malformed response.output_item.done event (`item.type` is missing); "
        "hotloop skipped what it couldn't read",
        "p sent a malformed response.incomplete event (`response.usage`: expected `object | null`, got `str`; "
        "`response.incomplete_details`: expected `object | null`, got `str`); hotloop skipped what it couldn't read",
    ]
    assert next(event for event in events if isinstance(event, Finished)).reason == "length"
    failed = {"type": "response.failed", "response": response("failed", error="the GPU caught fire")}
    try:
        ResponsesParser(where="p").feed(json.dumps(failed).encode())
    except ProviderError as error:
        assert str(error) == "p response failed: the GPU caught fire"
    else:
        raise AssertionError("a failed response did not end the stream")
