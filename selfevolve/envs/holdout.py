"""Held-out means never seen: content keys and a content-disjoint train/test split.

Seeds alone do not hold a task out. Two seeds can draw the same 4×4 FrozenLake map (31 of the 64 evaluation maps
of the first default run were maps it had trained on), so a split by seed is not a split by content. Every
environment names the content of the task it was reset to (``TextEnv.content_key()``: the map, the room, the
request), and the split is decided by that key:

- **games** (FrozenLake, Sokoban, anything generated from a seed): a key belongs to the test split when its hash
  falls in the first ``HOLDOUT`` of the hash range, else to training. ``reset(seed)`` under ``split="train"``
  redraws (deterministically, from the seed) until the content is a training one, and under ``split="test"``
  until it is a test one. However long a run trains, it never meets a test map, and the split needs no list of
  what was trained on;
- **worlds with fixed task lists** (the tool worlds): their test split drops any task whose key equals a
  training task's (``envs/tools/base.py``).

Evaluation then takes the first ``n`` *distinct* test contents (``tasks/source.py``), and a run records the
digests of the contents it trained on, so that an evaluation on anything else reports seen and unseen apart.
"""

from __future__ import annotations

import hashlib
from typing import Callable, TypeVar

from selfevolve.errors import ConfigError

HOLDOUT = 0.2  # the share of the content space (by hash) that only evaluation sees
MAX_DRAWS = 1000  # redraws before a split is declared empty for these settings

T = TypeVar("T")


def digest(key: str) -> str:
    """A short, stable digest of a content key (what runs record and compare)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def content_digest(env) -> str:
    """The digest of the content ``env`` was just reset to (what a trajectory's ``task.content`` holds)."""
    return digest(env.content_key())


def bucket(key: str) -> str:
    """``"test"`` for the held-out share of content keys, ``"train"`` for the rest; stable across runs and
    machines (a hash of the key, not of Python's randomised ``hash``)."""
    h = int(hashlib.sha256(b"selfevolve-holdout\0" + key.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16)
    return "test" if h < HOLDOUT * 2**32 else "train"


def split_bucket(split: str) -> str | None:
    """Which bucket the ordinary game of an env option ``split`` plays: ``"train"``, ``"test"``, or None for
    either (``all``, or ``train+test``)."""
    parts = {"train", "test", "synth"} if split == "all" else set(str(split).split("+"))
    if "train" in parts and "test" not in parts:
        return "train"
    if "test" in parts and "train" not in parts:
        return "test"
    return None


def redraw_seed(seed: int, k: int) -> int:
    """The ``k``-th redraw of ``seed`` (k = 0 is the seed itself): a fixed function, so a seed always starts the
    same content."""
    if k == 0:
        return int(seed)
    return int(hashlib.sha256(f"{int(seed)}/{k}".encode()).hexdigest()[:15], 16)


def draw(seed: int, want: str | None, make: Callable[[int], T], key: Callable[[T], str], what: str) -> T:
    """``make(s)`` for the first of ``seed``'s redraws whose content ``key`` lies in bucket ``want`` (None: the
    seed's own draw). ``what`` names the settings in the error raised when none does within ``MAX_DRAWS``."""
    for k in range(MAX_DRAWS if want else 1):
        item = make(redraw_seed(seed, k))
        if want is None or bucket(key(item)) == want:
            return item
    raise ConfigError(f"{what}: no {want} content in {MAX_DRAWS} draws: these settings make too few distinct "
                      f"maps or rooms to hold some out; use settings with more of them, or split=train+test (every seed's "
                      f"own content, no held-out set)")
