"""Where tasks come from: seeds of an environment, split into training and held-out evaluation tasks.

A task is an environment seed (the seed fixes the map/room). Training seeds count up from 0 and a cursor
records how far a run has gone, so a resumed run continues with the very next task. Held out means never seen,
by content rather than by seed (``envs/holdout.py``): the environment's ``split="test"`` only ever starts
content that ``split="train"`` never does, and evaluation takes the first ``n`` *distinct* contents from the
seeds at ``seed_offset`` (10^6 by default) on.
"""

from __future__ import annotations

import random

from selfevolve.envs.holdout import digest
from selfevolve.types import Task


def make_task(env_name: str, seed: int, split: str = "train") -> Task:
    return Task(id=f"{env_name}-{split}-{seed}", env=env_name, seed=seed)


class SeedTasks:
    """Training tasks: a shuffled stream of environment seeds, reproducible from ``seed`` and a cursor."""

    def __init__(self, env_name: str, seed: int = 0, cursor: int = 0, block: int = 10_000):
        self.env_name = env_name
        self.seed = seed
        self.cursor = cursor
        self.block = block

    def _seed_at(self, i: int) -> int:
        # Seeds come in shuffled blocks so that consecutive steps see unrelated maps, yet position i always
        # maps to the same seed (the cursor alone restores the stream).
        b, j = divmod(i, self.block)
        order = list(range(self.block))
        random.Random(f"{self.seed}-{b}").shuffle(order)
        return b * self.block + order[j]

    def next(self, n: int) -> list[Task]:
        tasks = [make_task(self.env_name, self._seed_at(self.cursor + k)) for k in range(n)]
        self.cursor += n
        return tasks

    # What every task source offers the trainer (``tasks/learnability.py`` keeps a record; the stream needs none).
    @property
    def stream(self) -> "SeedTasks":
        """The plain seed stream (the warm start's expert episodes come from it)."""
        return self

    def update(self, trajectories) -> None:
        """Told what a step's rollouts achieved; the stream does not care."""

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}  # the cursor alone restores the stream (checkpointed as the task cursor)

    def load_state_dict(self, state: dict) -> None:
        pass


def seed_tasks(env_name: str, n: int, seed_offset: int = 1_000_000) -> list[Task]:
    """``n`` tasks on consecutive seeds from ``seed_offset``, whatever their content (benchmarks and tests that
    need some episodes; a held-out set is :func:`eval_tasks`)."""
    return [make_task(env_name, seed_offset + i, split="eval") for i in range(n)]


def eval_tasks(env, n: int, seed_offset: int = 1_000_000, max_seeds: int | None = None) -> list[Task]:
    """The held-out tasks: the first ``n`` seeds from ``seed_offset`` on whose content (``env.content_key()``
    after ``env.reset(seed)``) no earlier one had. ``env`` is a probe environment of the evaluation's options
    (its test split). Fewer than ``n`` when the split holds fewer distinct contents within ``max_seeds`` seeds
    (50·n by default): a 3×3 FrozenLake has about 15 held-out maps."""
    name = getattr(env, "name", type(env).__name__)
    tasks: list[Task] = []
    seen: set[str] = set()
    for i in range(max_seeds or max(50 * n, 1000)):
        if len(tasks) == n:
            break
        env.reset(seed_offset + i)
        key = digest(env.content_key())
        if key not in seen:
            seen.add(key)
            task = make_task(name, seed_offset + i, split="eval")
            task.content = key
            tasks.append(task)
    return tasks


def make_task_source(cfg, env_name: str):
    """The training tasks of a run: the seed stream, or learnability selection over it (``sampling.tasks``)."""
    stream = SeedTasks(env_name, seed=cfg.seed)
    if cfg.sampling.tasks == "stream":
        return stream
    from selfevolve.tasks.learnability import LearnabilityTasks

    s = cfg.sampling
    return LearnabilityTasks(stream, prior=s.prior, prior_weight=s.prior_weight, floor=s.floor, seed=cfg.seed)
