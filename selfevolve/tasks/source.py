"""Where tasks come from: seeds of an environment, split into training and held-out evaluation ranges.

A task is an environment seed (the seed fixes the map/room). Training seeds count up from 0 and a cursor
records how far a run has gone, so a resumed run continues with the very next task. Evaluation seeds start at
``seed_offset`` (10^6 by default) and are never trained on.
"""

from __future__ import annotations

import random

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


def eval_tasks(env_name: str, n: int, seed_offset: int = 1_000_000) -> list[Task]:
    return [make_task(env_name, seed_offset + i, split="eval") for i in range(n)]
