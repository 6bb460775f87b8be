"""Best-of-N search (``rollout.search=best_of_n``): N full rollouts per kept trajectory, keep the best score (the
seed's τ* = argmax R(τ))."""

from __future__ import annotations

import time

from selfevolve.rollout.runner import rollout
from selfevolve.rollout.search.scoring import Node, score, top
from selfevolve.rollout.search.spec import SearchResult, SearchStats


def best_of_n_search(policy, make_env, tasks, builder, spec, max_turns, gid, generator, rng, t0, greedy,
                     guide=None) -> SearchResult:
    """N independent rollouts per search (one batched rollout of all of them); keep the best-scored one.
    Scores are read at each rollout's final state (reward: R(τ)). A guided search guides all its N rollouts."""
    n = spec.n
    envs = [make_env() for _ in range(n * len(tasks))]
    stats = SearchStats()
    rep = [t for t in tasks for _ in range(n)]
    per_search = isinstance(generator, list)  # each search's N candidates draw from its stream
    trajs = rollout(policy, envs, rep, builder, max_turns=max_turns, stats=stats,
                    generator=[g for g in generator for _ in range(n)] if per_search else generator,
                    reuse_cache=spec.reuse_cache, greedy=greedy, guide=guide.each(n) if guide is not None else None)
    stats.candidates = sum(len(t.steps) for t in trajs)
    kept, trees = [], []
    for s, task in enumerate(tasks):
        group, nodes = trajs[s * n:(s + 1) * n], []
        for j, (t, env) in enumerate(zip(group, envs[s * n:(s + 1) * n])):
            info = t.steps[-1].info if t.steps else {}
            node = Node(j, None, s, None, None, t.steps, done=True, success=t.success, progress=float(env.progress()),
                        failed=bool(t.steps) and not info.get("truncated", False) and not t.success)
            node.score = score(node, spec)
            nodes.append(node)
        best = top(nodes, 1, rng[s] if isinstance(rng, list) else rng)[0]
        t = group[best.id]
        t.group_id = gid(s)
        t.search = {"strategy": "best_of_n", "tree": s, "node": best.id, "score": round(best.score, 5),
                    "scores": [round(x.score, 5) for x in nodes]}
        kept.append(t)
        trees.append({"task": task.id, "strategy": "best_of_n", "scorer": spec.scorer,
                      "nodes": [{"id": j, "parent": None, "turn": len(x.steps), "score": round(x.score, 5),
                                 "success": x.success, "kept": j == best.id} for j, x in enumerate(nodes)]})
    stats.seconds = time.perf_counter() - t0
    return SearchResult(kept, trees, stats)
