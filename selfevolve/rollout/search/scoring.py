"""The nodes of a search tree, their scores and the pick of the best ones.

Scorers (``search.scorer``) look at a node — a partial trajectory and the world state it reached:
``reward`` = its summed rewards; ``progress`` = the environment's progress heuristic (1 on success, 0 when the
episode ended in failure); ``value`` = summed rewards + V(state) from the value head (Self-AC: read after the
critic prompt; PPO: at the last prompt token; 0 at a finished episode), which keeps search informative when
only the episode's end is rewarded; ``weighted`` = a weighted sum of the three.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from selfevolve.agent.context import EpisodeContext
from selfevolve.rollout.search.spec import SearchSpec
from selfevolve.types import Step


@dataclass
class Node:
    """A partial trajectory in a search tree: its steps, the world state it reached (a snapshot) and its score."""

    id: int
    parent: int | None
    search: int
    snapshot: Any
    context: EpisodeContext
    steps: list[Step] = field(default_factory=list)
    done: bool = False  # the episode is over (finished by the world or cut by the turn limit)
    failed: bool = False  # the world ended it without success
    success: bool = False
    progress: float = 0.0
    value: float = 0.0
    score: float = 0.0
    row: int | None = None  # its row in the current key/value cache, while it is alive
    lookahead: dict | None = None  # what its lookahead continuation reached (lookahead search)

    @property
    def reward(self) -> float:
        return float(sum(s.reward for s in self.steps))


def node_scores(node: Node) -> dict[str, float]:
    """The three base scores of a node (see the module docstring)."""
    progress = 1.0 if node.success else 0.0 if node.failed else node.progress
    value = node.reward + (0.0 if node.done else node.value)
    return {"reward": node.reward, "progress": progress, "value": value}


def score(node: Node, spec: SearchSpec) -> float:
    s = node_scores(node)
    if spec.scorer == "weighted":
        return spec.w_reward * s["reward"] + spec.w_progress * s["progress"] + spec.w_value * s["value"]
    return s[spec.scorer]


def top(nodes: list[Node], k: int, rng: random.Random) -> list[Node]:
    """The ``k`` best-scored nodes; ties are broken at random (a fixed order would favour the first sample)."""
    order = list(nodes)
    rng.shuffle(order)
    return sorted(order, key=lambda n: -n.score)[:k]

