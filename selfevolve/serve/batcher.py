"""Concurrent requests, batched: one worker thread owns the model and runs every generation.

Requests arrive from the HTTP server's event loop; each becomes a :class:`Work` item (its prompts x n rows)
on a bounded queue. The worker takes the first waiting item, keeps collecting for ``window`` seconds (or until
``max_batch`` rows), then runs one ``Policy.generate`` per group of compatible rows — same temperature (0 is
greedy), and a request with a ``seed`` alone, so that its seed alone decides its samples. The model is never
used by two threads at once, and a batch of 8 short replies costs little more than one on this CPU (prefill and
decode steps are shared).

Nothing waits silently: a full queue refuses at once (:class:`Busy`, a 503), a work item whose client gave up
(its future cancelled at the request timeout) is skipped, and an exception inside generation is set on the
futures of its rows (a 500 naming it) instead of killing the worker.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from selfevolve.serve.protocol import Row


class Busy(Exception):
    """The server cannot take work now: the queue is full, or the worker has stopped."""


@dataclass
class Work:
    """One request's rows: every prompt repeated ``n`` times, one future for all of them."""

    prompts: list[list[int]]
    n: int
    max_tokens: int
    temperature: float  # 0: greedy
    seed: int | None
    future: Future = field(default_factory=Future)

    @property
    def rows(self) -> list[list[int]]:
        return [p for p in self.prompts for _ in range(self.n)]

    def group_key(self):
        """Rows that can share one generate call: same temperature; a seeded request keeps to itself."""
        return (self.temperature, id(self) if self.seed is not None else None)


def truncate(ids: list[int], logprobs: list[float], budget: int, stop_ids) -> tuple[list[int], list[float], str]:
    """A row generated under a batch's largest budget, cut to its own; why it ended (``stop`` or ``length``).
    Rows are independent given the prompt, so cutting equals generating with the smaller budget."""
    ids, logprobs = ids[:budget], logprobs[:budget]
    return ids, logprobs, "stop" if ids and ids[-1] in stop_ids else "length"


class Batcher:
    def __init__(self, policy, *, max_batch: int = 16, window: float = 0.05, max_pending: int = 256):
        self.policy = policy
        self.max_batch, self.window = max_batch, window
        self.queue: queue.Queue[Work] = queue.Queue(maxsize=max_pending)
        self.rng = random.Random()  # seeds of unseeded sampled batches
        self.batches = 0  # generate calls made (for /health and the benchmark)
        self.rows_done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="selfevolve-serve-batcher", daemon=True)

    def start(self) -> "Batcher":
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    @property
    def pending(self) -> int:
        return self.queue.qsize()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, work: Work) -> Future:
        """Queue ``work``; its future resolves to ``rows[prompt][choice]``. Busy when the queue is full."""
        if not self.alive:
            raise Busy("the generation worker has stopped; restart the server")
        try:
            self.queue.put_nowait(work)
        except queue.Full:
            raise Busy(f"the queue is full ({self.queue.maxsize} requests waiting); retry later") from None
        return work.future

    # ---- the worker ---------------------------------------------------------------------------------------
    def _collect(self) -> list[Work]:
        """The first waiting item, then whatever arrives within the window, up to ``max_batch`` rows."""
        try:
            items = [self.queue.get(timeout=0.1)]
        except queue.Empty:
            return []
        rows = len(items[0].rows)
        deadline = time.monotonic() + self.window
        while rows < self.max_batch:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                items.append(self.queue.get(timeout=left))
            except queue.Empty:
                break
            rows += len(items[-1].rows)
        # a client that gave up (request timeout) cancelled its future: skip its work
        return [w for w in items if w.future.set_running_or_notify_cancel()]

    def _loop(self) -> None:
        while not self._stop.is_set():
            groups: dict = {}
            for work in self._collect():
                groups.setdefault(work.group_key(), []).append(work)
            for items in groups.values():
                try:
                    results = self._generate(items)
                except Exception as e:  # noqa: BLE001 - reported to every waiting client, the worker goes on
                    for w in items:
                        w.future.set_exception(e)
                    continue
                for w, rows in zip(items, results):
                    w.future.set_result(rows)

    def _generate(self, items: list[Work]) -> list[list[list[Row]]]:
        """One generate call for ``items`` (same group): per item, per prompt, its n rows."""
        temperature, seed = items[0].temperature, items[0].seed
        prompts = [r for w in items for r in w.rows]
        greedy = temperature == 0
        # greedy log-probs are the model's own distribution (temperature 1); sampled ones the sampling distribution
        self.policy.temperature = 1.0 if greedy else temperature
        generator = self.policy.stream(seed if seed is not None else self.rng.getrandbits(63))
        gen = self.policy.generate(prompts, greedy=greedy, generator=generator,
                                   max_new_tokens=max(w.max_tokens for w in items))
        self.batches += 1
        self.rows_done += len(prompts)
        out, i = [], 0
        for w in items:
            per_prompt = []
            for _ in w.prompts:
                rows = []
                for _ in range(w.n):
                    ids, lps, finish = truncate(gen.ids[i], gen.logprobs[i], w.max_tokens, self.policy.stop_ids)
                    rows.append(Row(ids, lps, self.policy.decode(ids), finish))
                    i += 1
                per_prompt.append(rows)
            out.append(per_prompt)
        return out
