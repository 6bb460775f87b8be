"""The HTTP side of ``selfevolve serve``: a FastAPI app over a :class:`~selfevolve.serve.batcher.Batcher`.

Endpoints (OpenAI's shapes, docs/serving.md): ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions``, and ``GET /health`` (queue length, batches run). Bodies are read with a byte bound
and parsed with the bounded JSON reader of :mod:`selfevolve.untrusted`; every refusal is an OpenAI-style error
body with a 4xx status, so the openai client raises a readable ``BadRequestError`` and so on. A request that
gets no reply within ``request_timeout`` seconds is answered 504 rather than left hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from selfevolve.agent.prompt import render_chat
from selfevolve.serve.batcher import Batcher, Busy, Work
from selfevolve.serve.protocol import (ChatRequest, CompletionRequest, InvalidRequest, Limits, MAX_ROWS,
                                       chat_messages, chat_response, check_prompt, completion_prompts,
                                       completion_response, error_body, refuse_unsupported, reply_budget)
from selfevolve.untrusted import loads_json


@dataclass
class ServeOptions:
    """What ``selfevolve serve`` takes beside the run: limits, batching, patience."""

    limits: Limits = Limits()
    max_batch: int = 16
    # seconds the batcher waits for more requests after the first: at 10 ms, 8 clients settled into two
    # alternating batches of 4 (the clients just answered came back after the window closed); at 50 ms all 8
    # shared one batch, for +6-27% tokens/s, at +50 ms per lone request (docs/benchmarks.md, serving)
    window: float = 0.05
    max_pending: int = 256
    request_timeout: float = 300.0
    # seconds a request body may take to arrive: a client that stops sending half-way would otherwise hold its
    # connection (and its buffered chunks) for as long as it likes; 1 MB, the largest body, takes milliseconds
    # on a local link
    body_timeout: float = 10.0


async def _read_body(request: Request, max_bytes: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise InvalidRequest(f"the body is over {max_bytes:,} bytes", status=413)
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_json(request: Request, max_bytes: int, timeout: float):
    """The body as JSON, read no further than ``max_bytes`` (a chunked body has no length to check first) and
    for no longer than ``timeout`` seconds (408 after that; the unread rest makes the server close the
    connection)."""
    declared = request.headers.get("content-length", "")
    if declared.isdecimal() and int(declared) > max_bytes:
        raise InvalidRequest(f"the body is {int(declared):,} bytes; at most {max_bytes:,} are read", status=413)
    try:
        body = await asyncio.wait_for(_read_body(request, max_bytes), timeout)
    except asyncio.TimeoutError:
        raise InvalidRequest(f"the body did not arrive within {timeout:g} s", status=408) from None
    try:
        return loads_json(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidRequest(f"the body is not valid JSON ({str(e)[:200]})") from None


def _parse(cls, data):
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object")
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        # a union's member names (str, list[int]...) sit in the location: the field is what the user wrote
        where = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and (p == "str" or "[" in p)))
        raise InvalidRequest(f"{where or 'body'}: {err['msg']}", where or None) from None


def create_app(policy, name: str, options: ServeOptions | None = None, batcher: Batcher | None = None) -> FastAPI:
    """The app serving ``policy`` as model ``name``; starts its batcher's worker (stopped on shutdown)."""
    opts = options or ServeOptions()
    limits = opts.limits
    batcher = batcher or Batcher(policy, max_batch=opts.max_batch, window=opts.window, max_pending=opts.max_pending)
    batcher.start()
    tok = policy.tokenizer

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        batcher.stop()

    app = FastAPI(title="selfevolve serve", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.batcher = batcher

    @app.exception_handler(InvalidRequest)
    async def _refused(_request, e: InvalidRequest):
        return JSONResponse(error_body(e.message, e.param, code=e.code), status_code=e.status)

    def check_model(model: str) -> None:
        if model != name:
            raise InvalidRequest(f"model {model!r} is not served here; available: {name}", "model", 404,
                                 "model_not_found")

    async def run(work: Work):
        if len(work.rows) > MAX_ROWS:
            raise InvalidRequest(f"n x prompts = {len(work.rows)} rows; at most {MAX_ROWS} per request", "n")
        try:
            future = batcher.submit(work)
        except Busy as e:
            raise InvalidRequest(f"server unavailable: {e}", status=503) from None
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), opts.request_timeout)
        except asyncio.TimeoutError:
            future.cancel()  # not started yet: the worker skips it
            raise InvalidRequest(f"no reply within {opts.request_timeout:g} s (selfevolve serve --request-timeout; "
                                 f"{batcher.pending} requests waiting)", status=504) from None
        except Exception as e:  # noqa: BLE001 - generation failed: a server error that names it, never a hang
            raise InvalidRequest(f"generation failed: {type(e).__name__}: {str(e)[:300]}", status=500) from None

    @app.get("/health")
    async def health():
        return {"status": "ok" if batcher.alive else "worker stopped", "model": name, "pending": batcher.pending,
                "batches": batcher.batches, "rows": batcher.rows_done}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "selfevolve"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        req = _parse(ChatRequest, await _read_json(request, limits.max_body_bytes, opts.body_timeout))
        check_model(req.model)
        refuse_unsupported(req)
        param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
        budget = reply_budget(req.max_completion_tokens or req.max_tokens, limits, param)
        try:
            ids = render_chat(tok, chat_messages(req))
        except InvalidRequest:
            raise
        except Exception as e:  # noqa: BLE001 - the template's own refusal (e.g. roles out of order) is a 400
            raise InvalidRequest(f"messages: the chat template refused them ({str(e)[:200]})", "messages") from None
        check_prompt(ids, budget, limits, policy.vocab_size, "messages")
        temperature = 1.0 if req.temperature is None else req.temperature
        rows = await run(Work([ids], req.n, budget, temperature, req.seed))
        return chat_response(name, ids, rows[0], tok, req.logprobs)

    @app.post("/v1/completions")
    async def completions(request: Request):
        req = _parse(CompletionRequest, await _read_json(request, limits.max_body_bytes, opts.body_timeout))
        check_model(req.model)
        refuse_unsupported(req)
        budget = reply_budget(req.max_tokens, limits)
        prompts = []
        for k, p in enumerate(completion_prompts(req.prompt)):
            ids = tok.encode(p, add_special_tokens=False) if isinstance(p, str) else list(p)
            prompts.append(check_prompt(ids, budget, limits, policy.vocab_size, "prompt"))
        temperature = 1.0 if req.temperature is None else req.temperature
        rows = await run(Work(prompts, req.n, budget, temperature, req.seed))
        return completion_response(name, prompts, rows, tok, req.logprobs is not None)

    return app


# ---- running it -------------------------------------------------------------------------------------------
def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free port), bound before the server starts so its address is known."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


class Server:
    """uvicorn serving ``app`` on ``sock``: :meth:`run` in the foreground (the CLI) or :meth:`start` in a thread
    (tests, benchmarks)."""

    def __init__(self, app: FastAPI, sock: socket.socket):
        import uvicorn

        self.sock = sock
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def run(self) -> None:
        self.server.run(sockets=[self.sock])

    def start(self, timeout: float = 30.0) -> "Server":
        self.thread = threading.Thread(target=self.run, name="selfevolve-serve-http", daemon=True)
        self.thread.start()
        for _ in range(int(timeout * 20)):
            if self.server.started:
                return self
            if not self.thread.is_alive():
                break
            threading.Event().wait(0.05)
        raise RuntimeError(f"the server at {self.url} did not start within {timeout:g} s")

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(10)
        self.sock.close()


def limits_for(policy, max_tokens: int = 512, max_prompt_tokens: int = 4096) -> Limits:
    """The server's bounds for ``policy``: prompt + reply must fit the model's positions."""
    context = getattr(policy.model.config, "max_position_embeddings", None) or max_prompt_tokens + max_tokens
    return Limits(max_tokens=max_tokens, max_prompt_tokens=max_prompt_tokens, context=int(context))


def load_served_run(run_dir: str | Path, adapter_scale: float = 1.0):
    """``(policy, config, checkpoint step)`` of a run or checkpoint folder, as ``selfevolve eval`` loads it;
    ``adapter_scale``: the LoRA update's weight for as long as the server runs (``Policy.adapter_scaled``)."""
    from selfevolve.train.run import load_run

    cfg, policy, state = load_run(run_dir)
    if adapter_scale != 1.0:  # entered for the process's lifetime: the server is the policy's only user
        policy.adapter_scaled(adapter_scale).__enter__()
    return policy, cfg, state["step"]
