"""Reading a run folder for the viewer, as untrusted input.

A run folder may come from anyone (a shared link, a downloaded archive), so nothing in it is executed or
trusted: JSONL lines are parsed by :func:`selfevolve.untrusted.loads_json` (bounded depth and numbers), the
config by ``load_yaml`` (plain data), the experience pool is opened read-only, and every record is rebuilt field
by field into the shape the page expects (a string where text is expected, a finite number or None where a
number is, lists of equal length for token statistics). A line that is malformed, cut short or of the wrong
shape is skipped and counted, never a crash: the page shows the counts. The rebuilding of one record is in
``fields.py``; this module reads the files and puts the run together.

Only the fields the page shows are kept. The result is plain JSON-able data: ``RunData.summary`` for the page's
first screen (config, metrics, one small index entry per trajectory, the evaluations and the warm start's
losses) and ``RunData.steps`` / ``RunData.trees`` / ``RunData.evals`` (the episodes of each held-out evaluation,
in the order of ``eval_trajectories.jsonl``), which the page reads one step (or evaluation) at a time.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selfevolve.errors import SelfEvolveError
from selfevolve.experience.pool import _connect as connect_pool
from selfevolve.untrusted import load_yaml, loads_json
from selfevolve.view.fields import (
    config_facts,
    eval_trajectory,
    integer,
    llm_call,
    metric,
    num,
    text,
    trajectory,
    tree,
    warm_step,
)


@dataclass
class RunData:
    root: Path
    summary: dict[str, Any]
    steps: dict[int, list[dict]] = field(default_factory=dict)
    trees: dict[int, list[dict]] = field(default_factory=dict)
    evals: dict[int, list[dict]] = field(default_factory=dict)


def group_evals(trajs: list[dict]) -> tuple[dict[int, list[dict]], list[dict]]:
    """Episodes grouped into evaluations (one per step and label, numbered in file order) and a summary entry of
    each: its step, label, episodes and successes, and per episode ``[task id, success, seen]``."""
    evals: dict[int, list[dict]] = {}
    keys: dict[tuple[int, str], int] = {}
    for t in trajs:
        k = keys.setdefault((t["eval"]["step"], t["eval"]["label"]), len(keys))
        evals.setdefault(k, []).append(t)
    summary = []
    for (step, label), k in keys.items():
        for i, t in enumerate(evals[k]):
            t["index"] = i
        summary.append({"k": k, "step": step, "label": label, "n": len(evals[k]),
                        "ok": sum(t["success"] for t in evals[k]),
                        "tasks": [[t["task"]["id"], t["success"], t["eval"]["seen"]] for t in evals[k]]})
    return evals, summary


def searchable(t: dict) -> str:
    """The lower-case text a search looks in: task, request, replies, observations, state keys (the page's
    ``haystack`` in static/summary.js is the same, for single-file pages)."""
    parts = [t["task"]["id"], t["query"], t["task"]["instruction"]]
    for u in t["turns"]:
        parts += [u["action"], u["observation"], u["state_key"]]
    return "\n".join(parts).lower()


def read_jsonl(path: Path, parse, skipped: Counter, notes: list[str] | None = None) -> list:
    """``parse(record)`` of each line of ``path``; lines that fail are counted in ``skipped[path.name]``. With
    ``notes`` (the files a run always writes), a missing or unreadable file is said there, not silently shown
    as a run without records."""
    out: list = []
    if not path.is_file():
        if notes is not None:
            notes.append(f"{path.name} is missing: nothing of it is shown" if not path.exists() else
                         f"{path.name} is not a file: nothing of it is shown")
        return out
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    out.append(parse(loads_json(line)))
                except (ValueError, TypeError, AttributeError, RecursionError):  # JSONDecodeError is a ValueError
                    skipped[path.name] += 1
    except OSError as e:  # no permission, an I/O error
        if notes is None:
            skipped[path.name] += 1
        else:
            notes.append(f"{path.name} cannot be read ({e.strerror or e})")
    return out


def pool_items(path: Path, ids: set[int], skipped: Counter) -> tuple[dict[int, dict], dict[str, int]]:
    """The experience pool's rows named by ``ids`` (recalled trajectories, shown insights) and the row counts by
    kind, from ``experience.sqlite`` opened read-only (a bad file is counted, not raised)."""
    if not path.is_file():
        return {}, {}
    items, counts = {}, {}
    try:
        conn = connect_pool(path, readonly=True)  # trusted_schema off; views and triggers refused
        try:
            counts = {text(k, 50): int(n) for k, n in conn.execute("SELECT kind, COUNT(*) FROM items GROUP BY kind")}
            wanted = sorted(ids)
            for start in range(0, len(wanted), 500):  # SQLite bounds the number of parameters of one query
                chunk = wanted[start:start + 500]
                rows = conn.execute("SELECT id, kind, text, key_text, intent, origin, step, score, success FROM items "
                                    f"WHERE id IN ({','.join('?' * len(chunk))})", chunk)
                for r in rows:
                    items[int(r[0])] = {"kind": text(r[1], 50), "text": text(r[2], 20_000), "key": text(r[3], 2000),
                                        "intent": text(r[4], 200), "origin": text(r[5], 50), "step": integer(r[6]),
                                        "score": num(r[7]), "success": bool(r[8])}
        finally:
            conn.close()
    except (sqlite3.Error, SelfEvolveError, ValueError, TypeError, OverflowError):
        skipped[path.name] += 1
    return items, counts


def attach_judge_replies(steps: dict[int, list[dict]], calls: list[dict]) -> None:
    """The judge scores a step's trajectories in order, one ``judge`` call each (``rewards/judge.py``), so the
    k-th judge call of step s belongs to its k-th trajectory — attached only where the counts agree."""
    by_step = defaultdict(list)
    for c in calls:
        if c["purpose"] == "judge":
            by_step[c["step"]].append(c["output"])
    for s, trajs in steps.items():
        replies = by_step.get(s, [])
        if len(replies) == len(trajs):
            for t, reply in zip(trajs, replies):
                t["judge_reply"] = reply


def attach_search_requests(steps: dict[int, list[dict]], trees: dict[int, list[dict]]) -> None:
    """Search rollouts (``rollout.search=beam|lookahead``) leave ``flags["query"]`` out; the request is the
    observation at the root of the trajectory's search tree."""
    for s, trajs in steps.items():
        for t in trajs:
            k = (t["search"] or {}).get("tree")
            if t["query"] or k is None or not 0 <= k < len(trees.get(s, [])):
                continue
            roots = [n for n in trees[s][k]["nodes"] if n["parent"] is None]
            if len(roots) == 1 and roots[0]["observation"]:
                t["query"] = roots[0]["observation"]


def load_evolve(root: Path) -> RunData:
    """A ``selfevolve evolve`` folder: its rounds' training runs (``round-R/train``) as one run whose steps
    continue from round to round (round R's step s is step offset_R + s), every metric row and trajectory
    marked with its round (``round``), and the facts naming the steps each round spans."""
    rounds = sorted((p for p in root.glob("round-*/train") if p.is_dir()),
                    key=lambda p: int(p.parent.name.split("-")[1]) if p.parent.name.split("-")[1].isdigit() else 0)
    if not rounds:
        raise SelfEvolveError(f"{root}: an evolve folder without a trained round yet (no round-R/train)")
    merged: RunData | None = None
    offset, facts = 0, []
    for folder in rounds:
        r = int(folder.parent.name.split("-")[1])
        part = load_run(folder)
        last = max([m["step"] for m in part.summary["metrics"]] + part.summary["steps"] + [0])
        for m in part.summary["metrics"]:
            m["step"] += offset
            m["round"] = r
        for steps in part.steps.values():
            for t in steps:
                t["step"] += offset
                t["flags"]["round"] = r
        for e in part.summary["index"]:
            e["s"] += offset
        steps = {s + offset: v for s, v in part.steps.items()}
        facts.append([f"round {r}", f"steps {offset}–{offset + last}"])
        if merged is None:
            merged = RunData(root, part.summary, steps, {s + offset: v for s, v in part.trees.items()})
        else:
            merged.summary["metrics"] += part.summary["metrics"]
            merged.summary["index"] += part.summary["index"]
            merged.steps.update(steps)
            merged.trees.update({s + offset: v for s, v in part.trees.items()})
            for k, v in part.summary["skipped"].items():
                merged.summary["skipped"][k] = merged.summary["skipped"].get(k, 0) + v
        offset += last
    merged.summary["steps"] = sorted(merged.steps)
    merged.summary["trees"] = {str(s): len(v) for s, v in sorted(merged.trees.items())}
    merged.summary["name"] = root.resolve().name
    merged.summary["facts"] = merged.summary["facts"] + facts
    return merged


def load_run(root: str | Path) -> RunData:
    """Everything the viewer shows of the run folder ``root`` (an evolve folder: :func:`load_evolve`)."""
    root = Path(root)
    if not root.is_dir():
        raise SelfEvolveError(f"{root}: no such run folder")
    if (root / "evolve.json").is_file() and not (root / "metrics.jsonl").is_file():
        return load_evolve(root)
    if not (root / "trajectories.jsonl").is_file() and not (root / "metrics.jsonl").is_file():
        raise SelfEvolveError(f"{root}: not a run folder (no trajectories.jsonl or metrics.jsonl)")
    skipped: Counter = Counter()
    cfg: dict = {}
    if (root / "config.yaml").is_file():
        try:
            cfg = load_yaml((root / "config.yaml").read_text(encoding="utf-8", errors="replace"), root / "config.yaml")
        except (SelfEvolveError, TypeError, ValueError):
            skipped["config.yaml"] += 1
        # plain JSON for the page (YAML may hold dates, non-string keys, .nan or .inf: those become null)
        cfg = json.loads(json.dumps(cfg, default=str, skipkeys=True), parse_constant=lambda _: None)
    notes: list[str] = []  # what the page and the command say about files a run always writes
    metrics = read_jsonl(root / "metrics.jsonl", metric, skipped, notes)
    steps: dict[int, list[dict]] = defaultdict(list)
    for t in read_jsonl(root / "trajectories.jsonl", trajectory, skipped, notes):
        steps[t["step"]].append(t)
    trees: dict[int, list[dict]] = defaultdict(list)
    for t in read_jsonl(root / "search_trees.jsonl", tree, skipped):
        trees[t.pop("step")].append(t)
    attach_search_requests(steps, trees)
    attach_judge_replies(steps, read_jsonl(root / "llm_calls.jsonl", llm_call, skipped))
    evals, eval_summary = group_evals(read_jsonl(root / "eval_trajectories.jsonl", eval_trajectory, skipped))
    every = [t for ts in (*steps.values(), *evals.values()) for t in ts]
    wanted = {i for t in every for i in (*t["insights"], *(r for u in t["turns"] for r in u["recalled"]))}
    pool, pool_counts = pool_items(root / "experience.sqlite", wanted, skipped)
    index = []
    for s in sorted(steps):
        for i, t in enumerate(steps[s]):
            t["index"] = i
            adv = [a for a in t["advantages"] if a is not None]
            index.append({"s": s, "i": i, "g": t["group"], "r": t["reward"], "ok": t["success"], "n": len(t["turns"]),
                          "a": adv[0] if adv else None, "task": t["task"]["id"], "j": t["judge_score"]})
    summary = {
        "name": root.resolve().name,
        "facts": config_facts(cfg),
        "config": cfg,
        "metrics": metrics,
        "index": index,
        "steps": sorted(steps),
        "trees": {str(s): len(v) for s, v in sorted(trees.items())},
        "evals": eval_summary,
        "warm": read_jsonl(root / "warm_start.jsonl", warm_step, skipped),
        "pool": pool,
        "pool_counts": pool_counts,
        "skipped": dict(skipped),
        "notes": notes,
    }
    return RunData(root, summary, dict(steps), dict(trees), evals)
