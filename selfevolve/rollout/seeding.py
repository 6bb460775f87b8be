"""Per-episode sampling seeds: an episode's samples depend on the episode alone.

A training episode draws its sampling noise from its own stream, seeded from (run seed, step, position of
the episode in the step's batch, task id). So the same episode samples the same tokens whichever batch it is
played in: in one batch on the driver, or in the share of any number of Ray workers (``docs/scaling.md``).
A resumed run needs no sampler state either: the step number rebuilds the seeds.

The seed is a hash (sha256), not Python's ``hash()``, which differs from one process to the next.
"""

from __future__ import annotations

import hashlib

from selfevolve.models.sampler import Sampler, Stream


def episode_seed(run_seed: int, step: int, index: int, task_id: str) -> int:
    """A 63-bit seed for episode ``index`` of training step ``step``."""
    digest = hashlib.sha256(f"selfevolve/{run_seed}/{step}/{index}/{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def episode_streams(sampler: Sampler, run_seed: int, step: int, indices: list[int], task_ids: list[str]
                    ) -> list[Stream]:
    """One random stream of ``sampler`` per episode (``indices[k]``: the episode's position in the whole step's
    batch)."""
    return [sampler.stream(episode_seed(run_seed, step, i, t)) for i, t in zip(indices, task_ids)]
