"""What a trajectory search is asked (``SearchSpec``: ``rollout.search`` with the ``search.*`` settings) and what it
returns (``SearchResult``: the kept trajectories, the trees, the generation counts)."""

from __future__ import annotations

from dataclasses import dataclass

from selfevolve.rollout.runner import RolloutStats
from selfevolve.types import Trajectory

SEARCHES = ("sample", "best_of_n", "beam", "lookahead")
SCORERS = ("reward", "progress", "value", "weighted")


@dataclass
class SearchSpec:
    """The ``rollout.search`` strategy with the ``search.*`` settings (see ``config.SearchConfig``)."""

    name: str = "beam"
    n: int = 4
    m: int = 4
    beams: int = 2
    depth: int = 2
    scorer: str = "reward"
    w_reward: float = 1.0
    w_progress: float = 1.0
    w_value: float = 0.0
    keep: str = "best"
    reuse_cache: bool = True
    share_prefix: bool = True  # the batch-wide prompt prefix (few-shot header); off only in benchmarks

    def __post_init__(self):
        if self.name not in SEARCHES:
            raise ValueError(f"rollout.search must be one of {', '.join(SEARCHES)}, got {self.name!r}")
        if self.scorer not in SCORERS:
            raise ValueError(f"search.scorer must be one of {', '.join(SCORERS)}, got {self.scorer!r}")

    @classmethod
    def from_config(cls, cfg) -> "SearchSpec":
        s = cfg.search
        return cls(cfg.rollout.search, s.n, s.m, s.beams, s.depth, s.scorer, s.w_reward, s.w_progress, s.w_value,
                   s.keep, s.reuse_cache)

    @property
    def needs_value(self) -> bool:
        return self.scorer == "value" or (self.scorer == "weighted" and self.w_value > 0)

    def kept_per_search(self) -> int:
        return self.beams if self.name in ("beam", "lookahead") and self.keep == "all" else 1


@dataclass
class SearchStats(RolloutStats):
    """Generation counts of a search batch (every candidate and lookahead turn included)."""

    candidates: int = 0  # children created (actions sampled and stepped), lookahead continuations excluded
    lookahead_tokens: int = 0  # generated in lookahead continuations (part of new_tokens)


@dataclass
class SearchResult:
    trajectories: list[Trajectory]
    trees: list[dict]  # per search: {"task", "nodes": [{id, parent, turn, action, observation, reward, score, ...}]}
    stats: SearchStats

    def metrics(self) -> dict[str, float]:
        """``search/compute_multiple``: tokens generated per kept trajectory ÷ the tokens of a kept trajectory's
        own actions (1.0 for plain sampling, ~N for best-of-N, ~B·M for beam); ``search/kept_success``."""
        kept = self.trajectories
        own = sum(len(s.action_ids) for t in kept for s in t.steps)
        return {
            "search/compute_multiple": self.stats.new_tokens / max(1, own),
            "search/kept_success": sum(t.success for t in kept) / max(1, len(kept)),
            "search/candidates": float(self.stats.candidates),
            "search/generated_tokens": float(self.stats.new_tokens),
            "search/encoded_tokens": float(self.stats.prompt_tokens),
        }

