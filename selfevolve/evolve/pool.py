"""The task pool across rounds: every task the agent wrote for itself, with its attempts and successes.

Each round's hindsight tasks join the pool (``add``); a task never leaves it, and its index never changes, so
the round's tasks file (``tasks.jsonl``, the pool in order, split ``synth``) and the seeds that start its tasks
stay valid as the pool grows. Training draws from it by learnability (``tasks/learnability.py``): a task's
success rate p̂ is its Beta-prior estimate (eq. 1 there, a new task at ``sampling.prior``) and its weight
p̂(1 − p̂) + ``sampling.floor`` (eq. 2); ``evolve.curriculum=false`` draws uniformly instead (the ablation).

The pool also keeps, per task, its latest successful rollouts as training rows (``evolve.buffer_per_task``):
the expert-iteration buffer that the imitation term replays (``evolve/imitation.py``). They are kept as token
rows with the log-probs they were sampled with, which the off-policy ratio needs.

:class:`PoolTasks` is the trainer's task source over the pool (``next``, ``update``, ``metrics``,
``state_dict``): a round's trainer checkpoints it every step, so a run that stops mid-round resumes with the
pool's counts and buffer exactly as they were at that step.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selfevolve.envs.task_files import save_tasks
from selfevolve.tasks.learnability import learnability_weight, success_estimate, weighted_sample
from selfevolve.types import Task

HISTOGRAM_BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # success-rate bins of the report: [0, .2), ..., [.8, 1]


@dataclass
class Entry:
    """One pool task: the world task (reference, verifier), where it came from and how it has fared."""

    task: Task
    writer: str  # "template" | "llm": who phrased it
    round: int  # the round that wrote it
    exploration: int  # the sandbox seed of the exploration it came from
    attempts: int = 0
    successes: int = 0
    buffer: list[dict[str, Any]] = field(default_factory=list)  # successful rollouts as rows (imitation)

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task.to_dict(), "writer": self.writer, "round": self.round,
                "exploration": self.exploration, "attempts": self.attempts, "successes": self.successes}


def longest_share(lengths: list[int], share: float) -> list[int]:
    """Indexes of the longest ``lengths``: the ``share`` of them, longest first, and every one as long as the last
    one taken (a tie is never split by order)."""
    if not lengths:
        return []
    cut = sorted(lengths, reverse=True)[max(1, math.ceil(share * len(lengths))) - 1]
    return [i for i, n in enumerate(lengths) if n >= cut]


class TaskPool:
    """The pool's tasks in order, their content keys (a task already in the pool is a duplicate) and the draw."""

    def __init__(self, prior: float = 0.5, prior_weight: float = 2.0, floor: float = 0.05, curriculum: bool = True):
        self.prior, self.prior_weight, self.floor, self.curriculum = prior, prior_weight, floor, curriculum
        self.entries: list[Entry] = []

    def __len__(self) -> int:
        return len(self.entries)

    @staticmethod
    def key(task: Task) -> str:
        """A task's content: its goal (the map or room and the state to reach; for a tool world the answer and
        changes) and request. Two tasks with the same key are the same task."""
        return json.dumps([task.goal, " ".join(task.instruction.casefold().split())], sort_keys=True)

    def keys(self) -> set[str]:
        return {self.key(e.task) for e in self.entries}

    def add(self, tasks: list[tuple[Task, str, int]], round_: int) -> list[Entry]:
        """Add ``(task, writer, exploration seed)`` tuples written in round ``round_``; tasks get pool ids
        ``{env}-r{round}-{k}``. Returns the new entries (the caller has removed duplicates)."""
        new = []
        for task, writer, seed in tasks:
            task.id = f"{task.id.split('-synth-')[0]}-r{round_}-{len(self.entries):04d}"
            task.split = "synth"
            new.append(Entry(task, writer, round_, seed))
            self.entries.append(new[-1])
        return new

    def estimate(self, e: Entry) -> float:
        return success_estimate(e.successes, e.attempts, self.prior, self.prior_weight)

    def weight(self, e: Entry) -> float:
        return learnability_weight(self.estimate(e), self.floor) if self.curriculum else 1.0

    def draw(self, n: int, rng: random.Random, among: list[int] | None = None) -> list[int]:
        """Indexes of ``n`` pool tasks (without replacement while they last; then again), by learnability or,
        with ``curriculum`` off, uniformly; ``among``: only from these indexes."""
        idx = list(range(len(self.entries))) if among is None else list(among)
        out: list[int] = []
        while len(out) < n and idx:
            out += weighted_sample(idx, [self.weight(self.entries[i]) for i in idx], n - len(out), rng)
        return out

    def longest(self, share: float) -> list[int]:
        """Indexes of the pool's tasks with the longest references (:func:`longest_share`)."""
        return longest_share([len(e.task.solution or []) for e in self.entries], share)

    def histogram(self) -> dict[str, int]:
        """How many played tasks have an empirical success rate s/a in each bin (the unplayed apart)."""
        bins = {f"{lo:.1f}-{hi:.1f}": 0 for lo, hi in zip(HISTOGRAM_BINS, HISTOGRAM_BINS[1:])}
        bins["unplayed"] = 0
        for e in self.entries:
            if not e.attempts:
                bins["unplayed"] += 1
                continue
            p = e.successes / e.attempts
            k = min(int(p / 0.2), 4)
            lo = HISTOGRAM_BINS[k]
            bins[f"{lo:.1f}-{HISTOGRAM_BINS[k + 1]:.1f}"] += 1
        return bins

    # ---- files --------------------------------------------------------------------------------------------
    def save(self, folder: Path, name: str = "pool") -> Path:
        """``NAME.jsonl`` (the entries with their counts), ``NAME_buffer.json`` (their replay buffers) and, for
        ``name="pool"``, ``tasks.jsonl`` (the world tasks in pool order, what the round's environment plays with
        ``split=synth``). Returns the tasks file."""
        folder.mkdir(parents=True, exist_ok=True)
        _write(folder / f"{name}.jsonl", "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n"
                                                 for e in self.entries))
        _write(folder / f"{name}_buffer.json", json.dumps([e.buffer for e in self.entries]))
        if name == "pool":
            save_tasks([e.task for e in self.entries], str(folder / "tasks.jsonl"))
        return folder / "tasks.jsonl"

    def load(self, folder: Path, name: str = "pool") -> None:
        self.entries = []
        for line in (folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            self.entries.append(Entry(Task.from_dict(d["task"]), d["writer"], int(d["round"]),
                                      int(d["exploration"]), int(d["attempts"]), int(d["successes"])))
        buffers = json.loads((folder / f"{name}_buffer.json").read_text(encoding="utf-8"))
        for e, buf in zip(self.entries, buffers):
            e.buffer = list(buf)

    # ---- the trainer's state (counts and buffer at a step) ----------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"counts": [[e.attempts, e.successes] for e in self.entries],
                "buffer": [e.buffer for e in self.entries]}

    def load_state(self, state: dict[str, Any]) -> None:
        for e, (a, s), buf in zip(self.entries, state.get("counts", []), state.get("buffer", [])):
            e.attempts, e.successes, e.buffer = int(a), int(s), list(buf)


def _write(path: Path, text: str) -> None:
    """Write through a temporary file, so that a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class PoolTasks:
    """A round's training-task source over the pool (what :class:`~selfevolve.train.trainer.Trainer` takes as
    ``tasks``). ``seeds[i]`` is the environment seed that starts pool task ``i`` (``split=synth`` with the
    round's tasks file); ``buffer_rows(traj)`` turns a successful trajectory into the rows the buffer keeps;
    ``among``: the pool indexes training draws from (``evolve.rl_longest``; None: every task)."""

    def __init__(self, pool: TaskPool, env_name: str, seeds: list[int], *, seed: int = 0, buffer_per_task: int = 2,
                 buffer_rows=None, among: list[int] | None = None):
        self.pool, self.env_name, self.seeds, self.among = pool, env_name, seeds, among
        self.buffer_per_task, self.buffer_rows = buffer_per_task, buffer_rows
        self.rng = random.Random(f"evolve-pool-{seed}")
        self.index = {e.task.id: i for i, e in enumerate(pool.entries)}
        self.draws = 0
        self.cursor = 0  # the trainer checkpoints a cursor; the pool's draw is its own state

    @property
    def stream(self) -> "PoolTasks":
        return self

    def task(self, i: int) -> Task:
        e = self.pool.entries[i]
        return Task(id=e.task.id, env=self.env_name, seed=self.seeds[i], origin="synthesized", intent=e.task.intent)

    def next(self, n: int) -> list[Task]:
        self.draws += 1
        return [self.task(i) for i in self.pool.draw(n, self.rng, self.among)]

    def update(self, trajectories) -> None:
        """Count each rollout on its task, and keep the latest successes as rows (with the draw they came in)."""
        for traj in trajectories:
            i = self.index.get(traj.task.id)
            if i is None:
                continue
            e = self.pool.entries[i]
            e.attempts += 1
            e.successes += bool(traj.success)
            if traj.success and self.buffer_rows is not None and self.buffer_per_task > 0:
                for row in self.buffer_rows(traj):
                    e.buffer.append({**row, "draw": self.draws})
                del e.buffer[:-self.buffer_per_task]

    def metrics(self) -> dict[str, float]:
        ps = [self.pool.estimate(e) for e in self.pool.entries if e.attempts]
        out = {"pool/tasks": float(len(self.pool)), "pool/played": float(len(ps)),
               "pool/buffered": float(sum(len(e.buffer) for e in self.pool.entries)),
               "pool/drawn_from": float(len(self.pool) if self.among is None else len(self.among))}
        if ps:
            out.update({"pool/p_mean": sum(ps) / len(ps), "pool/p_low": sum(p <= 0.1 + 1e-9 for p in ps) / len(ps),
                        "pool/p_high": sum(p >= 0.9 - 1e-9 for p in ps) / len(ps)})
        return out

    def state_dict(self) -> dict:
        state = self.rng.getstate()
        return {"draws": self.draws, "rng": [state[0], list(state[1]), state[2]], **self.pool.state()}

    def load_state_dict(self, state: dict) -> None:
        if not state:
            return
        self.draws = int(state.get("draws", 0))
        if state.get("rng"):
            v = state["rng"]
            self.rng.setstate((v[0], tuple(v[1]), v[2]))
        self.pool.load_state(state)
