"""FrozenLake's maps: drawn by seed with gymnasium's generator (bounded), keyed by their rows for the held-out
split (``envs/holdout.py``), and checked once per setting that a map can be drawn at all."""

from __future__ import annotations

from typing import Any

from gymnasium.envs.toy_text.frozen_lake import is_valid
from gymnasium.utils import seeding

from selfevolve.envs.holdout import draw
from selfevolve.errors import ConfigError


def gym_seed(seed: Any) -> int:
    return int(seed) % (2**63)  # gymnasium wants a non-negative int


MAX_SIZE = 16  # a larger map no longer reads as a text observation (and 5000 would take minutes to draw)
MAP_DRAWS = 1000  # boards drawn for one map before the settings are refused


def random_map(size: int, p_frozen: float, seed: int) -> list[str]:
    """A random map with a path from S to G: gymnasium's ``generate_random_map`` draws (same seed, same map), but
    bounded: after ``MAP_DRAWS`` boards without a path the settings are refused instead of drawing forever."""
    rng, _ = seeding.np_random(seed)
    for _ in range(MAP_DRAWS):
        board = rng.choice(["F", "H"], (size, size), p=[p_frozen, 1 - p_frozen])
        board[0][0], board[-1][-1] = "S", "G"
        if is_valid(board, size):
            return ["".join(row) for row in board]
    raise ConfigError(f"frozenlake: no map with a path to the goal in {MAP_DRAWS} draws at size={size}, "
                      f"p_frozen={p_frozen}; raise p_frozen or use a smaller map")


_DRAWABLE: set[tuple] = set()  # settings already shown to draw a map, per process


def check_drawable(size: int, p_frozen: float, bucket: str | None) -> None:
    """Draw seed 0's map once per setting (a few boards for any sensible one): raises the generator's named
    error at construction for settings with no map, or none of this split (``envs/holdout.py``)."""
    if (size, p_frozen, bucket) not in _DRAWABLE:
        draw(0, bucket, lambda s: random_map(size, p_frozen, gym_seed(s)), key=map_key,
             what=f"frozenlake size={size} p_frozen={p_frozen}")
        _DRAWABLE.add((size, p_frozen, bucket))


def map_key(desc: list[str]) -> str:
    """A map's content key: its rows in gymnasium's letters."""
    return "/".join(desc)
