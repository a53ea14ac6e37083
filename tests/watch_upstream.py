"""A real model server that misbehaves, for the watch's hostile-input tests and fault rows (aiohttp, loopback).

It serves OpenAI's Chat Completions at /v1/chat/completions, streamed or whole as asked. What it
does is named by the request's model, found in the raw body by a pattern, so a body no parser
reads still chooses. Every answer says, in `x-received-bytes` and `x-received-sha256`, what
body it got (read a block at a time, never held whole: a 300 MB request costs it nothing):

- `echo`: answers with the key the request carried (`Authorization` or `x-api-key`), split across
  two streamed deltas, or whole, and calls a tool with it as the argument.
- `refuse`: a 401 whose message quotes the key, as OpenAI's own does.
- `deep`: an answer nested `DEPTH` levels: the whole body, or mid-stream an event whose usage details are.
- `deep-call`: a whole answer calling a tool with arguments nested `DEEP_CALL` levels.
- `drop`: two streamed chunks, then the connection closed without the stream's end.
- `early`: `Fine.` as soon as the body names it (`{"model":"early"` first), before the rest has arrived.
- anything else: `Fine.`

`GET /v1/models` lists one model, and says in `x-received-framing` how the request's body was framed.

`python tests/watch_upstream.py` serves it on a free port, prints its root URL, and runs until killed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sys
from typing import Any

from aiohttp import web

DEPTH = 100_000
DEEP_CALL = 40_000
MODEL = re.compile(rb'"model"\s*:\s*"([^"]*)"')
EARLY = b'{"model":"early"'
STREAMED = re.compile(rb'"stream"\s*:\s*true')
HEAD = 64 * 1024  # bytes of a request's body kept to find its model: a huge body's model comes first
USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}


def deep(depth: int = DEPTH) -> bytes:
    """A JSON document nested `depth` arrays deep: valid, and past any recursive parser's stack."""
    return b"[" * depth + b"]" * depth


def key_of(request: web.Request) -> str:
    return request.headers.get("x-api-key") or request.headers.get("Authorization", "").removeprefix("Bearer ")


def chunk(delta: dict[str, Any], finish: str | None = None, usage: object = None) -> bytes:
    document = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": usage,
    }
    return b"data: " + json.dumps(document).encode() + b"\n\n"


def whole(content: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    reason = "tool_calls" if calls else "stop"
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
        "usage": USAGE,
    }


def call(key: str) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": "login", "arguments": json.dumps({"key": key})}}


async def chat(request: web.Request) -> web.StreamResponse:
    body, size, digest = b"", 0, hashlib.sha256()
    async for block in request.content.iter_any():  # a body of any size, never held whole
        body += block[: HEAD - len(body)]
        size += len(block)
        digest.update(block)
        if EARLY in body:
            break  # answered before the rest of the body arrives
    received = {"x-received-bytes": str(size), "x-received-sha256": digest.hexdigest()}
    found = MODEL.search(body)
    model = found.group(1).decode() if found else ""
    key = key_of(request)
    if model == "refuse":
        message = f"Incorrect API key provided: {key}. You can find your API key at https://platform.openai.com."
        error = {"error": {"message": message, "type": "invalid_request_error"}}
        return web.json_response(error, status=401, headers=received)
    if not STREAMED.search(body):
        if model == "deep":
            return web.Response(body=deep(), content_type="application/json", headers=received)
        if model == "deep-call":  # short enough for a log to keep whole (`agent/step.py`'s MAX_ARGUMENTS)
            arguments = {**call(key)["function"], "arguments": '{"a":' + deep(DEEP_CALL).decode() + "}"}
            return web.json_response(whole("", [{**call(key), "function": arguments}]), headers=received)
        answer = whole(f"Your key is {key}.", [call(key)]) if model == "echo" else whole("Fine.")
        return web.json_response(answer, headers=received)
    stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", **received})
    await stream.prepare(request)
    if model == "drop":
        await stream.write(chunk({"role": "assistant", "content": "Half "}) + chunk({"content": "an answer"}))
        assert request.transport is not None
        request.transport.close()  # the connection goes without the stream's end, as a crashed server's does
        return stream
    if model == "echo":
        half = len(key) // 2
        parts = [chunk({"role": "assistant", "content": f"Your key is {key[:half]}"}), chunk({"content": key[half:]})]
        parts.append(chunk({"tool_calls": [{"index": 0, **call(key)}]}))
        parts.append(chunk({}, "tool_calls"))
    elif model == "deep":
        nested = b'{"choices":[],"usage":{"prompt_tokens_details":' + deep() + b"}}"  # where any JSON may go
        parts = [chunk({"role": "assistant", "content": "Before "}), b"data: " + nested + b"\n\n"]
        parts.append(chunk({"content": "after."}, "stop"))
    else:
        parts = [chunk({"role": "assistant", "content": "Fine."}, "stop")]
    for part in [*parts, b"data: " + json.dumps({"choices": [], "usage": USAGE}).encode() + b"\n\n"]:
        await stream.write(part)
    await stream.write(b"data: [DONE]\n\n")
    await stream.write_eof()
    return stream


async def models(request: web.Request) -> web.Response:
    """The model list, saying how the request's body was framed (a GET has none: no length, no chunks)."""
    framing = f"{request.headers.get('Content-Length')} {request.headers.get('Transfer-Encoding')}"
    listing = {"object": "list", "data": [{"id": "echo", "object": "model", "owned_by": "watch_upstream"}]}
    return web.json_response(listing, headers={"x-received-framing": framing})


def application() -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    return app


async def serve() -> None:
    runner = web.AppRunner(application(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)
