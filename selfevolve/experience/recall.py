"""SEER — stepwise experience recall (seed 002, ``shared/design/methods.md`` §6).

At every turn t of an episode, each successful trajectory τ' of the pool is scored against the history H_t:

    s1 = (1 + cos(E_Ht, E_τ')) / 2           trajectory similarity (the seed's eq.; the authors' code uses raw cos)
    s2 = |U_Ht ∩ U_τ'| / |U_Ht|              tool-chain coverage (0 before the first tool call)
    s3 = 1[I_Ht = I_τ']                      intent match
    score = λ1·s1 + λ2·s2 + λ3·s3            (λ = 1 by default)

and the top k (4) are shown, shuffled, as few-shot episodes. ``mode="query"`` is the seed's query-only
ablation: recall once, at the first turn, from the request's embedding E_q against the stored requests.
In worlds without tools (FrozenLake, Sokoban) U is always empty, so s2 is 0 and drops out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np


def s1_similarity(cos: np.ndarray) -> np.ndarray:
    """s1 = (1 + cos) / 2, in [0, 1]."""
    return (1.0 + cos) / 2.0


def s2_tool_coverage(history_tools: list[str], tools: list[str]) -> float:
    """s2 = |U_H ∩ U_τ| / |U_H| over tool *names* as sets; 0 when the history has called no tool yet."""
    h = set(history_tools)
    return len(h & set(tools)) / len(h) if h else 0.0


def s3_intent(intent: str | None, other: str | None) -> float:
    """s3 = 1 when both intents are known and equal."""
    return 1.0 if intent is not None and intent == other else 0.0


@dataclass(frozen=True)
class Weights:
    similarity: float = 1.0  # λ1
    tools: float = 1.0  # λ2
    intent: float = 1.0  # λ3


def seer_scores(query: np.ndarray, vectors: np.ndarray, history_tools: list[str], tools: list[list[str]],
                intent: str | None, intents: list[str | None], w: Weights) -> np.ndarray:
    """score = λ1·s1 + λ2·s2 + λ3·s3 of every pool trajectory (rows of ``vectors``, unit vectors) against one
    history (``query``: its unit embedding)."""
    s1 = s1_similarity(vectors @ query) if len(vectors) else np.zeros(0)
    s2 = np.array([s2_tool_coverage(history_tools, t) for t in tools], dtype=np.float64)
    s3 = np.array([s3_intent(intent, i) for i in intents], dtype=np.float64)
    return w.similarity * s1 + w.tools * s2 + w.intent * s3


def top_k(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the k highest scores, best first; ties go to the earlier row (the older experience)."""
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    return order[:k]


@dataclass
class Query:
    """What one episode's recall is scored from at this turn."""

    text: str  # H_t as text (agent/transcript.history_text)
    tools: list[str]  # U_Ht
    intent: str | None  # I_Ht (classified once per episode)


class SeerRecall:
    """Batched recall over a pool's successful trajectories: one embedding call per turn for all episodes."""

    def __init__(self, pool, k: int = 4, weights: Weights = Weights(), mode: str = "stepwise", seed: int = 0):
        self.pool, self.k, self.w, self.mode = pool, k, weights, mode
        self.rng = random.Random(seed)

    def candidates(self):
        items = [it for it in self.pool.items("trajectory") if it.success and it.turns]
        index = {it.id: n for n, it in enumerate(self.pool.items("trajectory"))}
        return items, [index[it.id] for it in items]

    def recall(self, queries: list[Query]) -> list[list]:
        """The top-k pool items for each query, best first (the caller shuffles them into the prompt)."""
        items, rows = self.candidates()
        if not items or not queries:
            return [[] for _ in queries]
        key = self.mode == "query"  # query-only: the request against the stored requests
        vectors = self.pool.matrix("trajectory", key=key)[rows]
        embedded = self.pool.embedder.encode([q.text for q in queries])
        out = []
        for q, e in zip(queries, embedded):
            s = seer_scores(e, vectors, [] if key else q.tools, [it.tools for it in items], q.intent,
                            [it.intent for it in items], self.w)
            out.append([items[j] for j in top_k(s, self.k)])
        return out

    def shuffled(self, chosen: list) -> list:
        """SEER shuffles the recalled examples into the prompt (no position bias towards the best)."""
        chosen = list(chosen)
        self.rng.shuffle(chosen)
        return chosen
