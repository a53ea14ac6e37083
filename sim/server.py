"""The simulator's HTTP server: vLLM's OpenAI-compatible endpoints, OpenAI's Responses API and Anthropic's Messages
API, as an aiohttp app (`embedded.py` puts it on a socket).

It also plays the faults that are about the connection: a refused request (`status`), silence
(`stall`) and a stream cut short (`drop_after`); scenario.py's docstring lists every fault.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from hotloop import __version__
from hotloop.sim import anthropic_api, json_depth, openai_api, responses_api
from hotloop.sim.anthropic_api import AnthropicError
from hotloop.sim.cache_diagnosis import Diagnoser
from hotloop.sim.engine import Generation, ModelNotFound, Refused, SimConfig, SimEngine, SimRequest
from hotloop.sim.openai_api import ApiError
from hotloop.sim.responses_api import ResponsesError
from hotloop.sim.scenario import Faults, nested_in
from hotloop.sim.scheduler import Admission


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server received it, for tests and for explaining cache behaviour."""

    path: str
    body: bytes
    model: str
    prompt_tokens: int
    cached_tokens: int
    received: float
    cache_write_tokens: int = 0
    status: int = 200  # a `status` fault's, for a refused request (which has no tokens)
    headers: Mapping[str, str] = field(default_factory=dict)  # as sent, for a session's affinity key


class ContextTooLong(ValueError):
    def __init__(self, prompt_tokens: int) -> None:
        super().__init__(prompt_tokens)
        self.prompt_tokens = prompt_tokens


class SimServer:
    def __init__(self, config: SimConfig | None = None) -> None:
        self.engine = SimEngine(config)
        self.admission = Admission(self.config.max_running, self.config.scheduling, self.engine.metrics.set_waiting)
        self.requests: deque[RecordedRequest] = deque(maxlen=1024)
        self.stored_responses = responses_api.ResponseStore()
        self.diagnoser = Diagnoser()  # Anthropic's cache-diagnostics fingerprints, by response id
        self.started = time.time()

    @property
    def config(self) -> SimConfig:
        return self.engine.config

    def app(self, metrics: Callable[[web.Request], Awaitable[web.Response]] | None = None) -> web.Application:
        """The simulator's routes; `metrics` answers `/metrics` in its place (the processes' scrape of them all)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", metrics or self.metrics)
        return app

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            call = openai_api.parse_chat(_json(raw, ApiError))
            self._check_model(call.request.model)
            if call.priority and self.config.scheduling != "priority":
                raise ApiError(400, f"Got priority {call.priority} but Priority scheduling is not enabled.")
        except ModelNotFound as missing:
            not_found = ApiError(404, f"The model `{missing}` does not exist.", "NotFoundError", "model")
            return _json_response(not_found.body(), not_found.status)
        except ApiError as error:
            return _json_response(error.body(), error.status)
        async with self._scheduled(call.request.model, call.priority) as arrived:
            try:
                generation = self._generate(call.request)
            except ContextTooLong as long:
                too_long = ApiError(
                    400,
                    f"This model's maximum context length is {self.config.max_model_len} tokens. However, your request "
                    f"has {long.prompt_tokens} input tokens. Please reduce the length of the input messages.",
                )
                return _json_response(too_long.body(), too_long.status)
            except Refused as refused:
                refusal = openai_api.refusal(refused.refusal.status)
                answer = _json_response(refusal.body(), refusal.status)
                return await self._refuse(request, raw, call.request.model, refused, answer)
            self._record(request, raw, generation)
            details = self.config.prompt_tokens_details
            if not call.stream:
                failure = openai_api.failure(generation.reply.error) if generation.reply.error else None
                return await self._respond_whole(
                    generation, openai_api.completion(generation, details), failure, arrived
                )
            chunks = openai_api.stream_chunks(generation, call.include_usage, details)
            return await self._respond_stream(request, generation, chunks, arrived)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's Responses API over the engine and prefix cache of Chat Completions, refusing what OpenAI refuses."""
        raw = await request.read()
        try:
            call = responses_api.parse_responses(_json(raw, ResponsesError), self.stored_responses)
            self._check_model(call.request.model)
        except ModelNotFound as missing:
            unknown = ResponsesError(
                400, f"The requested model '{missing}' does not exist.", "model", "model_not_found"
            )
            return _json_response(unknown.body(), unknown.status)
        except ApiError as error:
            return _json_response(error.body(), error.status)
        async with self._scheduled(call.request.model) as arrived:
            try:
                generation = self._generate(call.request)
            except ContextTooLong:
                too_long = ResponsesError(
                    400,
                    "Your input exceeds the context window of this model. Please adjust your input and try again.",
                    "input",
                    "context_length_exceeded",
                )
                return _json_response(too_long.body(), too_long.status)
            except Refused as refused:
                refusal = openai_api.refusal(refused.refusal.status)
                answer = _json_response(refusal.body(), refusal.status)
                return await self._refuse(request, raw, call.request.model, refused, answer)
            self._record(request, raw, generation)
            response = responses_api.Answer(call, generation)
            self.stored_responses.keep(response)
            if not call.stream:
                failure = openai_api.failure(generation.reply.error) if generation.reply.error else None
                return await self._respond_whole(generation, response.response(response.status), failure, arrived)
            return await self._respond_stream(request, generation, responses_api.stream_events(response), arrived)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        """Anthropic's Messages API over the same engine, cached at the request's breakpoints."""
        raw = await request.read()
        try:
            if "anthropic-version" not in request.headers:
                raise AnthropicError(400, "anthropic-version: header is required")
            beta = request.headers.get("anthropic-beta")
            call = anthropic_api.parse_messages(_json(raw, AnthropicError), beta, self.diagnoser)
            self._check_model(call.request.model)
        except ModelNotFound as missing:
            return _anthropic_error(AnthropicError(404, f"model: {missing}"))
        except AnthropicError as error:
            return _anthropic_error(error)
        async with self._scheduled(call.request.model) as arrived:
            try:
                generation = self._generate(call.request)
            except ContextTooLong as long:
                return _anthropic_error(
                    AnthropicError(
                        400, f"prompt is too long: {long.prompt_tokens} tokens > {self.config.max_model_len} maximum"
                    )
                )
            except AnthropicError as error:
                return _anthropic_error(error)
            except Refused as refused:
                answer = _anthropic_error(anthropic_api.refusal(refused.refusal.status))
                return await self._refuse(request, raw, call.request.model, refused, answer)
            self._record(request, raw, generation)
            if not call.stream:
                failure = anthropic_api.failure(generation.reply.error) if generation.reply.error else None
                return await self._respond_whole(generation, anthropic_api.message(generation, call), failure, arrived)
            events = anthropic_api.stream_events(generation, call)
            return await self._respond_stream(request, generation, events, arrived)

    def _check_model(self, model: str) -> None:
        if model not in self.config.models:
            raise ModelNotFound(model)

    @asynccontextmanager
    async def _scheduled(self, model: str, priority: int = 0) -> AsyncIterator[float]:
        """Run the request once the engine admits it; yields the arrival time, which TTFT counts from."""
        loop = asyncio.get_running_loop()
        arrived = loop.time()
        async with self.admission.slot(model, priority):
            self.engine.metrics.queued(model, loop.time() - arrived)
            yield arrived

    def _generate(self, request: SimRequest) -> Generation:
        generation = self.engine.generate(request)
        if generation.prompt_tokens > self.config.max_model_len:
            self.engine.abort(generation)
            raise ContextTooLong(generation.prompt_tokens)
        return generation

    async def _refuse(
        self, request: web.Request, raw: bytes, model: str, refused: Refused, response: web.Response
    ) -> web.Response:
        """A `status` fault's answer (the protocol's error `response`), with `retry-after` if set, after any stall."""
        self.requests.append(
            RecordedRequest(
                request.path, raw, model, 0, 0, time.time(), status=response.status, headers=dict(request.headers)
            )
        )
        await _stall_before_headers(refused.faults)
        _deepen(response, refused.faults)
        if refused.refusal.retry_after is not None:
            response.headers["retry-after"] = f"{refused.refusal.retry_after:g}"
        return response

    def _record(self, request: web.Request, raw: bytes, generation: Generation) -> None:
        self.requests.append(
            RecordedRequest(
                request.path,
                raw,
                generation.model,
                generation.prompt_tokens,
                generation.cached_tokens,
                time.time(),
                generation.cache.write,
                headers=dict(request.headers),
            )
        )

    async def _respond_whole(
        self, generation: Generation, body: dict[str, Any], failure: ApiError | AnthropicError | None, arrived: float
    ) -> web.Response:
        try:
            await _stall_before_headers(generation.reply.faults)
            await asyncio.sleep(generation.prefill_seconds)
            self._first_token(generation, arrived)
            # Whole, the answer decodes at the pace of the batch it joined.
            await asyncio.sleep(self.engine.pace(generation) * max(generation.output_tokens - 1, 0))
        except BaseException:
            self.engine.abort(generation)
            raise
        if failure is not None:
            self.engine.abort(generation)
            return _deepen(_json_response(failure.body(), failure.status), generation.reply.faults)
        self.engine.finish(generation)
        return _deepen(_json_response(body), generation.reply.faults)

    async def _respond_stream(
        self, request: web.Request, generation: Generation, chunks: Iterator[tuple[int, bytes]], arrived: float
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        finished = False
        try:
            await _stall_before_headers(generation.reply.faults)
            await response.prepare(request)
            first_token = functools.partial(self._first_token, generation, arrived)
            if (depth := generation.reply.faults.deep_json) is not None:
                chunks = _first_deepened(chunks, depth)
            if await _send_paced(response, generation, chunks, first_token, self.engine.pace):
                await response.write_eof()
                finished = True
            elif request.transport is not None:
                # `drop_after`: close() sends what was written, then ends the connection with no end of stream
                # (no last chunk, no [DONE] or message_stop), as from a server process that died.
                request.transport.close()
        except ConnectionResetError:
            pass  # the client went away mid-stream (a cancelled turn): an aborted request, as in vLLM
        finally:
            (self.engine.finish if finished and not generation.reply.error else self.engine.abort)(generation)
        return response

    def _first_token(self, generation: Generation, arrived: float) -> None:
        self.engine.metrics.first_token(generation.model, asyncio.get_running_loop().time() - arrived)
        self.engine.start_decoding(generation)

    async def models(self, request: web.Request) -> web.Response:
        if "anthropic-version" in request.headers:
            created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started))
            return _json_response(anthropic_api.models_page(list(self.config.models), created))
        data: list[dict[str, Any]] = [
            {
                "id": name,
                "object": "model",
                "created": int(self.started),
                "owned_by": "vllm",
                "root": name,
                "parent": None,
                "max_model_len": self.config.max_model_len,
                "permission": [],
            }
            for name in self.config.models
        ]
        return _json_response({"object": "list", "data": data})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return _json_response({"version": f"hotloop-sim-{__version__}"})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.engine.metrics.exposition(), content_type="text/plain", charset="utf-8")


def _json_response(body: Any, status: int = 200) -> web.Response:
    """JSON as vLLM sends it: compact, UTF-8 unescaped."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return web.Response(text=text, status=status, content_type="application/json")


def _deepen(response: web.Response, faults: Faults) -> web.Response:
    """The `deep_json` fault: the body's JSON made to start with arrays nested that deep."""
    if faults.deep_json is not None and isinstance(response.body, bytes):
        response.body = nested_in(response.body, faults.deep_json)
    return response


def _first_deepened(chunks: Iterator[tuple[int, bytes]], depth: int) -> Iterator[tuple[int, bytes]]:
    """The stream with its first chunk's JSON starting with arrays nested `depth` levels deep."""
    for n, (position, data) in enumerate(chunks):
        yield position, nested_in(data, depth) if n == 0 else data


def _anthropic_error(error: AnthropicError) -> web.Response:
    body = error.body()
    response = _json_response(body, error.status)
    response.headers["request-id"] = body["request_id"]
    return response


def _json(raw: bytes, error: type[ApiError] | type[AnthropicError]) -> Any:
    try:
        return json_depth.loads(raw)
    except json_depth.TooDeep as problem:
        raise error(400, f"the request body is {problem}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as problem:
        raise error(400, f"the request body is not valid JSON: {problem}") from None


async def _stall_before_headers(faults: Faults) -> None:
    if faults.stall is not None and faults.stall.before_headers:
        await asyncio.sleep(faults.stall.before_headers)


async def _send_paced(
    response: web.StreamResponse,
    generation: Generation,
    chunks: Iterator[tuple[int, bytes]],
    first_token: Callable[[], None],
    pace: Callable[[Generation], float],
) -> bool:
    """Write each chunk when its tokens would have been decoded; coalesce whatever is already due.

    `pace` is the seconds a token takes, asked again for each chunk as the batch changes.
    False when `drop_after` ends the stream early; a `stall` after some chunks holds the rest back.
    """
    loop = asyncio.get_running_loop()
    due, decoded = loop.time() + generation.prefill_seconds, 1  # token `decoded` is out at `due`
    faults = generation.reply.faults
    pending: list[bytes] = []
    decoding = False
    for sent, (position, data) in enumerate(chunks):
        if sent == faults.drop_after:
            await _flush(response, pending)
            return False
        if faults.stall is not None and sent == faults.stall.after_chunks:
            await _flush(response, pending)
            await asyncio.sleep(faults.stall.seconds)
            due += faults.stall.seconds  # the rest keeps its pace after the silence
        if position != decoded:
            due += pace(generation) * (position - decoded)
            decoded = position
        delay = due - loop.time()
        if delay > 0:
            await _flush(response, pending)
            await asyncio.sleep(delay)
        if position >= 1 and not decoding:
            decoding = True
            first_token()
        pending.append(data)
    await _flush(response, pending)
    return True


async def _flush(response: web.StreamResponse, pending: list[bytes]) -> None:
    if pending:
        await response.write(b"".join(pending))
        pending.clear()
