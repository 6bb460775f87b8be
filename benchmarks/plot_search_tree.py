"""Draw one search tree from ``search_trees.jsonl`` (written by ``selfevolve train`` with ``rollout.search`` set,
or by ``benchmarks/bench_search.py``): nodes are world states (the observation the node reached, with its score),
edges are the actions taken, the kept trajectory is drawn in green.

    python benchmarks/plot_search_tree.py runs/bench_search_trees.jsonl --index 0 --out docs/img/search_tree.png

Needs matplotlib (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def layout(nodes: list[dict]) -> dict[int, tuple[float, float]]:
    """x: evenly spaced within each turn, in the order of the parents' x; y: the turn (root on top)."""
    by_turn: dict[int, list[dict]] = {}
    for n in nodes:
        by_turn.setdefault(n["turn"], []).append(n)
    width = max(len(v) for v in by_turn.values())
    pos: dict[int, tuple[float, float]] = {}
    for turn in sorted(by_turn):
        row = sorted(by_turn[turn], key=lambda n: (pos[n["parent"]][0] if n["parent"] in pos else 0, n["id"]))
        for i, n in enumerate(row):
            pos[n["id"]] = ((i + 0.5) * width / len(row), -turn)
    return pos


def state_text(obs: str) -> str:
    """The grid part of an observation (lines of single-character cells), without hints or messages."""
    lines = [ln for ln in (obs or "").splitlines() if re.fullmatch(r"(\S )*\S", ln.strip()) and len(ln) < 40]
    return "\n".join(lines) if lines else (obs or "")[:24]


def short_action(text: str | None) -> str:
    from selfevolve.agent.parsing import parse_action

    a = parse_action(text or "").strip() or "(invalid)"
    return a if len(a) <= 22 else a[:20] + "…"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees")
    ap.add_argument("--index", type=int, default=0, help="which tree (line) of the file")
    ap.add_argument("--step", type=int, default=None, help="only trees of this training step")
    ap.add_argument("--out", default="docs/img/search_tree.png")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trees = [json.loads(line) for line in Path(args.trees).read_text().splitlines() if line.strip()]
    if args.step is not None:
        trees = [t for t in trees if t.get("step") == args.step]
    tree = trees[args.index]
    nodes = tree["nodes"]
    pos = layout(nodes)
    width = max(x for x, _ in pos.values()) + 1
    depth = -min(y for _, y in pos.values()) + 1
    fig, ax = plt.subplots(figsize=(max(8, 1.5 * width), 1.9 * depth))
    for n in nodes:
        if n["parent"] is None:
            continue
        (x0, y0), (x1, y1) = pos[n["parent"]], pos[n["id"]]
        kept = n.get("kept", False)
        ax.plot([x0, x1], [y0 - 0.28, y1 + 0.28], color="green" if kept else "0.7", lw=2.2 if kept else 0.8,
                zorder=1)
        label = short_action(n.get("action")) if n.get("valid", True) else "(invalid)"
        ax.text(x0 + 0.75 * (x1 - x0), y0 - 0.28 + 0.75 * (y1 - y0 + 0.56), label, fontsize=5.5, ha="center",
                va="center", color="darkgreen" if kept else "0.35", zorder=3,
                bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
    for n in nodes:
        x, y = pos[n["id"]]
        face = "#ffd700" if n.get("success") else "#f4b6b6" if n.get("failed") else "white"
        edge = "green" if n.get("kept") else "0.5"
        label = state_text(n.get("observation", ""))
        if "score" in n:
            label += f"\nscore {n['score']:.2f}"
        if n.get("lookahead"):
            label += f"\n(after +{n['lookahead']['turns']} turns)"
        ax.text(x, y, label, fontsize=5.5, family="monospace", ha="center", va="center", zorder=2,
                bbox=dict(boxstyle="round,pad=0.3", fc=face, ec=edge, lw=1.6 if n.get("kept") else 0.6))
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-depth + 0.4, 0.6)
    ax.axis("off")
    title = (f"{tree.get('strategy')} search, scorer={tree.get('scorer')}, task {tree.get('task')}: "
             f"{len(nodes)} nodes; green = the kept trajectory, red = episode ended in failure, gold = success")
    ax.set_title(title, fontsize=8)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=130, bbox_inches="tight")
    kept_score = [n["score"] for n in nodes if n.get("kept") and "score" in n]
    print(f"SUMMARY wrote {args.out}: tree {args.index} ({tree.get('strategy')}, {len(nodes)} nodes, "
          f"kept path scores {kept_score})")


if __name__ == "__main__":
    main()
