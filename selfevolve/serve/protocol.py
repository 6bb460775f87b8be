"""The OpenAI wire format of ``selfevolve serve``: request bodies in, response bodies out.

A request body is untrusted input (docs/security.md): every size is bounded here or in :class:`Limits` (the
body's bytes, messages, prompts, prompt tokens, ``n``, ``max_tokens``), and anything out of bounds or not
supported is an :class:`InvalidRequest` — a 400 naming the field — never a 500. Fields the OpenAI API has but
that would change the result here without being honoured (``stream``, ``stop``, ``top_p`` < 1, penalties,
``logit_bias``, tools, ``echo``...) are refused rather than silently ignored; harmless ones (``user``,
``metadata``, ``store``...) are ignored.

Token ids: every choice carries ``token_ids`` (the generated ids, the end-of-turn token included when the
reply stopped on it) and the response ``prompt_token_ids`` — exactly what the model saw and produced, so a
client never has to re-tokenise. With ``logprobs`` the per-token log-probs are aligned with ``token_ids``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

MAX_N = 8  # choices per request
MAX_PROMPTS = 16  # prompts of one /v1/completions request
MAX_ROWS = 32  # prompts x n: rows one request adds to the batch
MAX_MESSAGES = 512
MAX_TOP_LOGPROBS = 20


class InvalidRequest(Exception):
    """A request the server refuses: ``status`` (4xx), a message, and the field at fault."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code


@dataclass(frozen=True)
class Limits:
    """The server's bounds (``selfevolve serve`` options)."""

    max_tokens: int = 512  # reply budget a request may ask for
    max_prompt_tokens: int = 4096  # tokens of one prompt (the model's context bounds prompt + reply as well)
    context: int = 8192  # the model's positions: prompt + max_tokens must fit
    max_body_bytes: int = 1_000_000


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown fields: checked by ``refuse_unsupported``

    model: str = Field(max_length=256)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=MAX_N)
    seed: int | None = Field(None, ge=0, lt=2 ** 63)
    stream: bool = False
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None


class ChatRequest(_Body):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


class CompletionRequest(_Body):
    # StrictInt: a list of numbers is token ids, never floats rounded into ids
    prompt: str | list[StrictInt] | list[str | list[StrictInt]]  # one text, one id list, or a list of either
    max_tokens: int | None = Field(16, ge=1)  # the OpenAI default for completions
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)


# ---- checks -----------------------------------------------------------------------------------------------
_REFUSED_EXTRA = ("tools", "functions", "tool_choice", "function_call", "response_format", "audio", "modalities",
                  "prediction", "web_search_options")


def refuse_unsupported(req: _Body) -> None:
    """InvalidRequest for a field that would change the result without being honoured here."""
    def no(param: str, why: str):
        raise InvalidRequest(f"{param}: {why}", param)

    if req.stream:
        no("stream", "streaming is not supported; send stream=false (the whole reply comes in one response)")
    if req.stop:
        no("stop", "stop sequences are not supported; a reply ends at the model's end-of-turn token or max_tokens")
    if req.top_p is not None and req.top_p < 1:
        no("top_p", "nucleus sampling is not supported; use top_p=1 (or leave it out)")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            no(name, "penalties are not supported; use 0 (or leave it out)")
    if req.logit_bias:
        no("logit_bias", "not supported")
    for name in _REFUSED_EXTRA:
        value = (req.model_extra or {}).get(name)
        if value and not (name == "response_format" and isinstance(value, dict) and value.get("type") == "text"):
            no(name, "not supported by selfevolve serve (plain text replies only)")
    if isinstance(req, ChatRequest) and req.top_logprobs:
        no("top_logprobs", "alternatives are not returned; use logprobs=true with top_logprobs 0")
    if isinstance(req, CompletionRequest):
        if req.echo:
            no("echo", "not supported; the prompt's ids come back in prompt_token_ids")
        if req.suffix:
            no("suffix", "not supported")
        if req.best_of is not None and req.best_of != req.n:
            no("best_of", "not supported (best_of must equal n)")
        if req.logprobs:
            no("logprobs", "alternatives are not returned; use logprobs=0 for the sampled tokens' log-probs")


def reply_budget(requested: int | None, limits: Limits, param: str = "max_tokens") -> int:
    budget = limits.max_tokens if requested is None else requested
    if budget > limits.max_tokens:
        raise InvalidRequest(f"{param}={budget} is above this server's limit of {limits.max_tokens} "
                             f"(selfevolve serve --max-tokens)", param)
    return budget


def check_prompt(ids: list[int], budget: int, limits: Limits, vocab: int, param: str) -> list[int]:
    """``ids`` when they fit the limits and the vocabulary; InvalidRequest naming ``param`` otherwise."""
    if not ids:
        raise InvalidRequest(f"{param}: the prompt is empty", param)
    if len(ids) > limits.max_prompt_tokens:
        raise InvalidRequest(f"{param}: the prompt is {len(ids):,} tokens; at most {limits.max_prompt_tokens:,} are "
                             f"accepted (selfevolve serve --max-prompt-tokens)", param)
    if len(ids) + budget > limits.context:
        raise InvalidRequest(f"{param}: {len(ids)} prompt tokens + max_tokens {budget} exceed the model's context "
                             f"of {limits.context} tokens", param)
    bad = next((i for i in ids if not 0 <= i < vocab), None)
    if bad is not None:
        raise InvalidRequest(f"{param}: token id {bad} is outside the vocabulary [0, {vocab})", param)
    return ids


def message_text(msg: ChatMessage, index: int) -> str:
    """A message's content as text (a list of text parts is joined); InvalidRequest for images and the like."""
    if msg.content is None:
        return ""
    if isinstance(msg.content, str):
        return msg.content
    texts = []
    for part in msg.content:
        if part.type != "text" or part.text is None:
            raise InvalidRequest(f"messages[{index}].content: only text parts are supported, got {part.type!r}",
                                 f"messages[{index}].content")
        texts.append(part.text)
    return "".join(texts)


def chat_messages(req: ChatRequest) -> list[dict]:
    """The request's messages as the chat template takes them (``developer`` is the newer name of ``system``)."""
    return [{"role": "system" if m.role == "developer" else m.role, "content": message_text(m, i)}
            for i, m in enumerate(req.messages)]


def completion_prompts(prompt) -> list[str | list[int]]:
    """The prompts of a /v1/completions body: one text, one id list, texts or id lists."""
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        prompts = [prompt]
    else:
        prompts = list(prompt)
    if not prompts:
        raise InvalidRequest("prompt: no prompt given", "prompt")
    if len(prompts) > MAX_PROMPTS:
        raise InvalidRequest(f"prompt: {len(prompts)} prompts; at most {MAX_PROMPTS} per request", "prompt")
    return prompts


# ---- responses --------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One generated choice: ids, their log-probs, text, why it ended."""

    ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" (end-of-turn token) or "length" (max_tokens)


def _pieces(tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


def chat_response(name: str, prompt_ids: list[int], rows: list[Row], tokenizer, logprobs: bool) -> dict[str, Any]:
    choices = []
    for k, row in enumerate(rows):
        lp = None
        if logprobs:
            lp = {"content": [{"token": piece, "logprob": v, "bytes": list(piece.encode("utf-8")),
                               "top_logprobs": []}
                              for piece, v in zip(_pieces(tokenizer, row.ids), row.logprobs)], "refusal": None}
        choices.append({"index": k, "message": {"role": "assistant", "content": row.text},
                        "finish_reason": row.finish_reason, "logprobs": lp, "token_ids": row.ids})
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": name, "choices": choices, "prompt_token_ids": prompt_ids,
            "usage": _usage([len(prompt_ids)], rows)}


def completion_response(name: str, prompts: list[list[int]], rows: list[list[Row]], tokenizer,
                        logprobs: bool) -> dict[str, Any]:
    """``rows[p]``: the n choices of prompt p; choice indices run over prompts, then choices (as OpenAI's)."""
    choices = []
    for p_rows in rows:
        for row in p_rows:
            lp = None
            if logprobs:
                pieces = _pieces(tokenizer, row.ids)
                offsets = [sum(len(x) for x in pieces[:i]) for i in range(len(pieces))]
                lp = {"tokens": pieces, "token_logprobs": row.logprobs, "top_logprobs": None,
                      "text_offset": offsets}
            choices.append({"index": len(choices), "text": row.text, "finish_reason": row.finish_reason,
                            "logprobs": lp, "token_ids": row.ids})
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": name, "choices": choices,
            "prompt_token_ids": prompts if len(prompts) > 1 else prompts[0],
            "usage": _usage([len(p) for p in prompts], [x for r in rows for x in r])}


def _usage(prompt_tokens: list[int], rows: list[Row]) -> dict[str, int]:
    done = sum(len(r.ids) for r in rows)
    return {"prompt_tokens": sum(prompt_tokens), "completion_tokens": done, "total_tokens": sum(prompt_tokens) + done}


def error_body(message: str, param: str | None = None, kind: str = "invalid_request_error",
               code: str | None = None) -> dict[str, Any]:
    """The OpenAI error shape, which the openai client turns into a readable exception."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
