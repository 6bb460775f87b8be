"""LLM calls beyond the policy's own turns: intent classification, insight extraction (and later the judge).

One small interface — :meth:`LLM.chat`: a batch of chat conversations in, one reply text each out (greedy) —
with three backends:

- ``policy``: the policy being trained, adapter on (the agent judges and distils with what it has learnt);
- ``base``: the same weights with the LoRA adapter off (a fixed model, no second copy);
- a local model path (or a built-in name: ``tiny``, ``smollm2-135m``, ``gemma-3-270m``): a separate model,
  loaded once, no adapter;
- ``openai:MODEL``: an OpenAI-compatible server (``selfevolve serve``, vLLM, llama.cpp), configured by the
  ``llm_api`` section: URL, key variable, timeout, counted retries (:mod:`selfevolve.models.openai_backend`).

Every call is recorded in the run folder (``llm_calls.jsonl``: step, purpose, backend, the messages and the
reply), so nothing the agent learns from is hidden. Callers parse the replies themselves and count what they
cannot parse; a malformed reply is never an exception.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from selfevolve.models.openai_backend import OpenAIBackend, is_openai
from selfevolve.untrusted import loads_json, too_long

LOG = "llm_calls.jsonl"


def parse_json_list(text: str) -> list[dict] | None:
    """The JSON objects of a reply: a JSON list (its object items) or one object, text around it ignored (small
    models add prose); None when the reply holds no such JSON or is longer than ``MAX_ACTION_CHARS``."""
    if too_long(text):
        return None
    data = None
    for open_, close in (("[", "]"), ("{", "}")):
        start, end = text.find(open_), text.rfind(close)
        if start < 0 or end <= start:
            continue
        try:
            data = loads_json(text[start:end + 1])  # bounded: the reply is model output (selfevolve/untrusted.py)
            break
        except json.JSONDecodeError:
            continue
    if data is None:  # one bracket off, or cut by the reply budget: the first value with its brackets mended
        starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
        try:
            data = loads_json(mend_brackets(text[min(starts):])) if starts else None
        except json.JSONDecodeError:
            data = None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return None
    objects = [d for d in data if isinstance(d, dict)]
    return objects or None


def mend_brackets(text: str) -> str:
    """The first JSON value of ``text`` (which starts with ``[`` or ``{``) with its brackets mended, strings
    respected: a closing bracket that does not match the open one is dropped, and what is still open at the end
    is closed. A 135M writer's JSON is often one brace off (``{"table": "flights"}}}`` inside a list) or cut
    short by its token budget; nothing else is changed, so a reply that is wrong in another way stays wrong."""
    out: list[str] = []
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            if not stack or stack[-1] != ch:
                continue  # a stray closer: dropped
            stack.pop()
        out.append(ch)
        if not stack and not in_string and out:
            return "".join(out)  # the first value is complete: the prose after it is not JSON
    return "".join(out) + ('"' if in_string else "") + "".join(reversed(stack))


class LLM:
    def __init__(self, backend: str, policy=None, *, log_dir: str | Path | None = None, max_new_tokens: int = 160,
                 dtype: str = "auto", seed: int = 0, batch_size: int = 8, api=None):
        self.backend = backend
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.step = 0  # the training step the calls belong to (the trainer sets it; resume truncates by it)
        self.log_path = Path(log_dir) / LOG if log_dir is not None else None
        self.remote = None  # the openai:MODEL backend
        self.policy = None
        if is_openai(backend):
            from selfevolve.config_sections import LlmApiConfig

            self.remote = OpenAIBackend(backend, api if api is not None else LlmApiConfig())
        elif backend in ("policy", "base"):
            if policy is None:
                raise ValueError(f"LLM backend {backend!r} needs the policy")
            self.policy = policy
        else:
            from selfevolve.models.loading import load_model
            from selfevolve.models.policy import Policy

            model, tok = load_model(backend, dtype, seed=seed)
            self.policy = Policy(model, tok, lora=None, temperature=1.0, max_new_tokens=max_new_tokens)

    @property
    def tokenizer(self):
        return self.policy.tokenizer if self.policy is not None else None

    @property
    def constrains(self) -> bool:
        """Whether :meth:`chat` honours ``grammars`` (the local backends; an OpenAI-compatible server has no
        portable grammar parameter)."""
        return self.remote is None

    @property
    def retries(self) -> int:
        """Retried requests so far (the openai backend; 0 for the local ones)."""
        return self.remote.retries if self.remote is not None else 0

    def _mode(self):
        return self.policy.reference() if self.backend == "base" else contextlib.nullcontext()

    def chat(self, conversations: list[list[dict]], purpose: str, max_new_tokens: int | None = None,
             prefix: str = "", grammars: list | None = None) -> list[str]:
        """Greedy replies to ``conversations`` (each a list of ``{"role", "content"}``), in batches.

        ``prefix`` opens every reply of a local backend (appended after the assistant turn's opening, and part
        of the returned text): a 135M writer asked for JSON often continues the exploration's format instead,
        while one whose reply already starts with ``[{"query": "`` goes on in JSON. A remote server is asked
        plainly (the chat API has no portable way to prefill), so its replies come back without it.

        ``grammars``: one grammar factory per conversation (``models/constrained.py``): a local backend's reply
        is decoded under it, so it always has the schema's shape (a remote server is asked plainly: see
        :attr:`constrains`)."""
        from selfevolve.agent.prompt import render_chat

        budget = max_new_tokens or self.max_new_tokens
        if self.remote is not None:
            answers = self.remote.chat(conversations, budget)
            out = [reply for reply, _ in answers]
            self._record(purpose, conversations, out, [n for _, n in answers])
            return out
        out: list[str] = []
        opening = self.tokenizer.encode(prefix, add_special_tokens=False) if prefix else []
        for start in range(0, len(conversations), self.batch_size):
            batch = conversations[start:start + self.batch_size]
            prompts = [render_chat(self.tokenizer, msgs) + opening for msgs in batch]
            constraint = None
            if grammars is not None:
                from selfevolve.models.constrained import Constrained

                constraint = Constrained(self.tokenizer, [g() for g in grammars[start:start + self.batch_size]])
            with self._mode():
                gen = self.policy.generate(prompts, greedy=True, max_new_tokens=budget, constraint=constraint)
            out += [prefix + self.policy.decode(ids) for ids in gen.ids]
        self._record(purpose, conversations, out)
        return out

    def _record(self, purpose: str, conversations: list[list[dict]], replies: list[str],
                retries: list[int] | None = None) -> None:
        if self.log_path is None:
            return
        with self.log_path.open("a", encoding="utf-8", errors="replace") as f:  # a lone surrogate: never a crash
            for i, (msgs, reply) in enumerate(zip(conversations, replies)):
                row = {"step": self.step, "purpose": purpose, "backend": self.backend, "messages": msgs,
                       "output": reply}
                if retries is not None:
                    row["retries"] = retries[i]
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
