"""A scripted server for the tests: each request, on any protocol's route, gets the next answer in the script.

An answer is a stream (its server-sent events, each written as one chunk) or an error (a status and a
JSON body). Every request's body is kept. Streams are built here in each wire format's documented
shape (docs: ../shared/notes/providers.md), for the cases no recording shows.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from support import serving

ROUTES = ("/v1/chat/completions", "/v1/responses", "/v1/messages")


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str


Answer = list[bytes] | Refusal


@dataclass
class Script:
    answers: list[Answer]
    bodies: list[dict[str, Any]] = field(default_factory=list)


@asynccontextmanager
async def scripted(*answers: Answer) -> AsyncIterator[tuple[str, Script]]:
    """A server answering each request with the next of `answers`; yields its `/v1` base URL and the script."""
    script = Script(list(answers))

    async def handler(request: web.Request) -> web.StreamResponse:
        script.bodies.append(json.loads(await request.read()))
        answer = script.answers[len(script.bodies) - 1]
        if isinstance(answer, Refusal):
            error = {"error": {"message": answer.message, "type": "BadRequestError", "code": answer.status}}
            return web.json_response(error, status=answer.status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in answer:
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application()
    for route in ROUTES:
        app.router.add_post(route, handler)
    async with serving(app) as url:
        yield url, script


def data(*chunks: dict[str, Any], done: bool = True) -> list[bytes]:
    """Chat Completions chunks as its stream sends them, `data: [DONE]` last."""
    return [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks] + ([b"data: [DONE]\n\n"] if done else [])


def chat_call(index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A chunk with one whole tool call (a server may send a call in one piece: xAI, Ollama)."""
    call = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}


def chat_end(
    reason: str, prompt: int, completion: int, cached: int | None = None, timings: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The finish chunk, then the usage chunk (`choices: []`), as with `stream_options.include_usage`; llama.cpp's
    carries `prompt_tokens_details.cached_tokens` and its `timings`."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    last: dict[str, Any] = {"choices": [], "usage": usage}
    if timings is not None:
        last["timings"] = timings
    return [{"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}, last]


def chat_text(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def events(*objects: dict[str, Any]) -> list[bytes]:
    """Anthropic's or the Responses API's events: an `event:` line naming the type, then `data:`."""
    return [f"event: {o['type']}\ndata: {json.dumps(o)}\n\n".encode() for o in objects]


def anthropic_message(blocks: list[dict[str, Any]], stop_reason: str, input_tokens: int, output: int) -> list[bytes]:
    """A Messages stream of whole blocks: text (`text`), or tool_use (`name`, `input` as JSON text)."""
    said: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"usage": {"input_tokens": input_tokens, "output_tokens": 1}}}
    ]
    for index, block in enumerate(blocks):
        if "text" in block:
            said += [
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": block["text"]}},
            ]
        else:
            start = {"type": "tool_use", "id": f"toolu_{index}", "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": block["input"]}
            said += [
                {"type": "content_block_start", "index": index, "content_block": start},
                {"type": "content_block_delta", "index": index, "delta": delta},
            ]
        said.append({"type": "content_block_stop", "index": index})
    said += [
        {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": output}},
        {"type": "message_stop"},
    ]
    return events(*said)
