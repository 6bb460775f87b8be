"""The ``openai:MODEL`` backend of :class:`~selfevolve.models.llm.LLM`: LLM calls sent to an OpenAI-compatible
server (``selfevolve serve``, vLLM, llama.cpp's server, a hosted API) instead of a model in this process.

Where the server is and how patient to be comes from the ``llm_api`` config section: base URL, the *name* of
the environment variable holding the key (a key never sits in a config file or a run folder), a timeout per
request, retries with exponential backoff. Peer systems hang or stall silently when a server is down; here
every failed try prints one line (URL, error, retry n of N), retries are counted (``LLM.retries`` and the
``retries`` field of each ``llm_calls.jsonl`` row), and when the retries are spent the call raises
:class:`LLMBackendError` naming the URL, the model and the last error. Errors that a retry cannot fix (a wrong
model name, a bad key, a refused request) fail at once.

The openai client's own retries are switched off (``max_retries=0``) so that every try is counted here.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from selfevolve.errors import ConfigError, SelfEvolveError

PREFIX = "openai:"
NO_KEY = "none"  # sent when the key variable is unset: local servers ignore it, the client needs a string
RETRY_STATUS = {408, 409, 429}  # timeouts, conflicts and rate limits may pass; other 4xx will not


class LLMBackendError(SelfEvolveError):
    """The OpenAI-compatible server could not answer (after the retries, or with an error no retry fixes)."""


def is_openai(backend: str) -> bool:
    return isinstance(backend, str) and backend.startswith(PREFIX)


def model_of(backend: str) -> str:
    """``MODEL`` of ``openai:MODEL``; ConfigError when it is empty."""
    model = backend[len(PREFIX):].strip()
    if not model:
        raise ConfigError(f"LLM backend {backend!r}: name the served model, e.g. openai:my-run")
    return model


def retryable(error: Exception) -> bool:
    """Whether another try may succeed: connection errors, timeouts, 408/409/429 and 5xx answers."""
    import openai

    if isinstance(error, (openai.APIConnectionError, openai.APITimeoutError)):  # the timeout is a subclass
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRY_STATUS or error.status_code >= 500
    return False


def backoff_delays(first: float, retries: int) -> list[float]:
    """Seconds slept before each retry: ``first``, doubled each time."""
    return [first * 2 ** k for k in range(retries)]


def describe_error(error: Exception) -> str:
    """One line: the error's class and message (an HTTP error's status and the server's own message)."""
    import openai

    if isinstance(error, openai.APIStatusError):
        body = error.body if isinstance(error.body, dict) else {}
        inner = body.get("error")
        detail = body.get("message") or (inner.get("message") if isinstance(inner, dict) else inner)
        return f"HTTP {error.status_code}: {detail or error.message}"
    return f"{type(error).__name__}: {error}"


class OpenAIBackend:
    """Chat replies from ``spec.base_url``; one client, requests of a batch sent concurrently."""

    def __init__(self, backend: str, spec):
        from openai import OpenAI

        self.model = model_of(backend)
        if not spec.base_url:
            raise ConfigError(f"LLM backend {backend!r} needs llm_api.base_url (e.g. http://127.0.0.1:8000/v1)")
        self.spec = spec
        self.url = spec.base_url.rstrip("/")
        key = os.environ.get(spec.api_key_env) or NO_KEY
        self.client = OpenAI(base_url=self.url, api_key=key, timeout=spec.timeout, max_retries=0)
        self.retries = 0  # retries made over the backend's life (each also in its call's llm_calls.jsonl row)
        self._lock = threading.Lock()  # the requests of a batch run in threads

    def chat(self, conversations: list[list[dict]], max_new_tokens: int,
             temperature: float = 0.0) -> list[tuple[str, int]]:
        """``(reply, retries)`` per conversation, greedy (temperature 0) unless a ``temperature`` is given
        (``selfevolve bench`` samples for pass@k); LLMBackendError when one fails."""
        workers = max(1, min(self.spec.concurrency, len(conversations)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-api") as pool:
            return list(pool.map(lambda msgs: self._one(msgs, max_new_tokens, temperature), conversations))

    def _one(self, messages: list[dict], max_new_tokens: int, temperature: float = 0.0) -> tuple[str, int]:
        delays = backoff_delays(self.spec.backoff, self.spec.retries)
        for attempt in range(len(delays) + 1):
            try:
                reply = self.client.chat.completions.create(
                    model=self.model, messages=messages, max_tokens=max_new_tokens, temperature=temperature)
                content = reply.choices[0].message.content if reply.choices else None
                return content or "", attempt  # an empty reply is the caller's to count as malformed
            except Exception as error:  # noqa: BLE001 - sorted below; nothing is swallowed
                if not _is_api_error(error):
                    raise
                if not retryable(error):
                    raise LLMBackendError(f"LLM backend openai:{self.model} at {self.url} refused the request "
                                          f"({describe_error(error)})") from None
                if attempt == len(delays):
                    raise LLMBackendError(
                        f"LLM backend openai:{self.model} at {self.url} failed after {attempt + 1} tries "
                        f"(timeout {self.spec.timeout:g} s each; llm_api.retries={self.spec.retries}): "
                        f"{describe_error(error)}") from None
                with self._lock:
                    self.retries += 1
                print(f"warning: openai:{self.model} at {self.url}: {describe_error(error)}; retry "
                      f"{attempt + 1} of {len(delays)} in {delays[attempt]:g} s", file=sys.stderr, flush=True)
                time.sleep(delays[attempt])
        raise AssertionError("unreachable")


def _is_api_error(error: Exception) -> bool:
    import openai

    return isinstance(error, openai.APIError)
