"""Reading a run folder for the viewer, as untrusted input.

A run folder may come from anyone (a shared link, a downloaded archive), so nothing in it is executed or
trusted: JSONL lines are parsed by :func:`selfevolve.untrusted.loads_json` (bounded depth and numbers), the
config by ``load_yaml`` (plain data), the experience pool is opened read-only, and every record is rebuilt field
by field into the shape the page expects (a string where text is expected, a finite number or None where a
number is, lists of equal length for token statistics). A line that is malformed, cut short or of the wrong
shape is skipped and counted, never a crash: the page shows the counts.

Only the fields the page shows are kept. The result is plain JSON-able data: ``RunData.summary`` for the page's
first screen (config, metrics, one small index entry per trajectory, the evaluations and the warm start's
losses) and ``RunData.steps`` / ``RunData.trees`` / ``RunData.evals`` (the episodes of each held-out evaluation,
in the order of ``eval_trajectories.jsonl``), which the page reads one step (or evaluation) at a time.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selfevolve.errors import SelfEvolveError
from selfevolve.experience.pool import _connect as connect_pool
from selfevolve.untrusted import load_yaml, loads_json

MAX_TEXT = 200_000  # characters of one text field shown; a crafted megabyte reply is cut, not rendered whole
MAX_NODES = 20_000  # nodes of one search tree drawn
CONFIG_KEYS = (("model", "name"), ("env", "name"), ("env", "size"), ("algo", "name"), ("algo", "group_size"),
               ("train", "tasks_per_step"), ("train", "steps"), ("rollout", "search"), ("search", "scorer"),
               ("reward", "shaping"), ("reward", "source"), ("experience", "recall"), ("experience", "navigate"),
               ("agent", "context"), ("seed",))


@dataclass
class RunData:
    root: Path
    summary: dict[str, Any]
    steps: dict[int, list[dict]] = field(default_factory=dict)
    trees: dict[int, list[dict]] = field(default_factory=dict)
    evals: dict[int, list[dict]] = field(default_factory=dict)


# ---- field by field ------------------------------------------------------------------------------------------

def num(x: Any) -> float | None:
    """A finite number, else None (booleans are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def text(x: Any, limit: int = MAX_TEXT) -> str:
    """A string field as text: non-strings become "" (None) or their JSON, and long text is cut."""
    if x is None:
        return ""
    if not isinstance(x, str):
        x = json.dumps(x, ensure_ascii=False)
    return x if len(x) <= limit else x[:limit] + f"… [{len(x) - limit:,} more characters not shown]"


def integer(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def numbers(x: Any) -> list[float | None]:
    return [num(v) for v in x] if isinstance(x, list) else []


def tokens(x: Any) -> dict | None:
    """``{"text", "logprob", "entropy"}`` with lists of one length (the shortest given), or None."""
    if not isinstance(x, dict) or not isinstance(x.get("text"), list):
        return None
    pieces = [text(p, 1000) for p in x["text"]]
    lp, ent = numbers(x.get("logprob")), numbers(x.get("entropy"))
    n = len(pieces)
    return {"text": pieces, "logprob": (lp + [None] * n)[:n], "entropy": (ent + [None] * n)[:n]}


def turn(d: Any) -> dict:
    """One step of a logged trajectory, as the page shows it."""
    if not isinstance(d, dict):
        raise ValueError("a step is not an object")
    info = d.get("info") if isinstance(d.get("info"), dict) else {}
    prompt = d.get("prompt")
    call = info.get("tool_call")
    out = {
        "action": text(d.get("action_text")),
        "observation": text(d.get("observation")),
        "reward": num(d.get("reward")),
        "valid": d.get("valid") is not False,
        "done": d.get("done") is True,
        "state_key": text(d.get("state_key"), 2000),
        "uncertainty": num(d.get("uncertainty")),
        "info": {k: v for k, v in info.items() if k != "recalled"},
        "tool_call": {"name": text(call.get("name"), 200), "arguments": call.get("arguments")}
        if isinstance(call, dict) else None,
        "recalled": [i for i in info.get("recalled", []) if integer(i) is not None]
        if isinstance(info.get("recalled"), list) else [],
        "stripped": text(d.get("stripped")),
        "prompt": {"text": text(prompt.get("text")), "extends": prompt.get("extends") is True}
        if isinstance(prompt, dict) else None,
        "tokens": tokens(d.get("tokens")),
        "calls": [{"purpose": text(c.get("purpose"), 100), "text": text(c.get("text"))}
                  for c in d.get("calls", []) if isinstance(c, dict)] if isinstance(d.get("calls"), list) else [],
    }
    return out


def trajectory(rec: Any) -> dict:
    """One line of ``trajectories.jsonl`` as the page shows it; ValueError if it is not a trajectory."""
    if not isinstance(rec, dict) or integer(rec.get("step")) is None or not isinstance(rec.get("steps"), list):
        raise ValueError("not a trajectory record")
    task = rec.get("task") if isinstance(rec.get("task"), dict) else {}
    flags = rec.get("flags") if isinstance(rec.get("flags"), dict) else {}
    turns = [turn(s) for s in rec["steps"]]
    reward = num(rec.get("reward"))
    search = flags.get("search") if isinstance(flags.get("search"), dict) else None
    shown = ("query", "reference", "advantages", "values", "search", "judge_score", "shaped_reward", "guided",
             "insights", "intent", "intent_true")
    return {
        "step": rec["step"],
        "group": text(rec.get("group_id"), 500),
        "success": rec.get("success") is True,
        "reward": reward if reward is not None else sum(t["reward"] or 0.0 for t in turns),
        "task": {"id": text(task.get("id"), 500), "env": text(task.get("env"), 200), "seed": integer(task.get("seed")),
                 "instruction": text(task.get("instruction")), "intent": text(task.get("intent"), 200)},
        "system": text(rec.get("system")),
        "query": text(flags.get("query")),
        "reference": text(flags.get("reference")),
        "advantages": numbers(flags.get("advantages")),
        "values": numbers(flags.get("values")),
        "judge_score": num(flags.get("judge_score")),
        "shaped_reward": num(flags.get("shaped_reward")),
        "guided": flags.get("guided") is True,
        "insights": [i for i in flags.get("insights", []) if integer(i) is not None]
        if isinstance(flags.get("insights"), list) else [],
        "intent": text(flags.get("intent"), 200),
        "search": None if search is None else {"tree": integer(search.get("tree")),
                                               "node": integer(search.get("node")), "score": num(search.get("score")),
                                               "strategy": text(search.get("strategy"), 50)},
        "flags": {k: v for k, v in flags.items() if k not in shown},
        "turns": turns,
    }


def tree(rec: Any) -> dict:
    """One line of ``search_trees.jsonl``: nodes with integer ids and parents (None for a root)."""
    if not isinstance(rec, dict) or integer(rec.get("step")) is None or not isinstance(rec.get("nodes"), list):
        raise ValueError("not a search tree record")
    nodes = []
    for n in rec["nodes"][:MAX_NODES]:
        if not isinstance(n, dict) or integer(n.get("id")) is None:
            continue
        nodes.append({"id": n["id"], "parent": integer(n.get("parent")), "turn": integer(n.get("turn")) or 0,
                      "action": text(n.get("action"), 5000), "observation": text(n.get("observation"), 5000),
                      "reward": num(n.get("reward")), "score": num(n.get("score")), "progress": num(n.get("progress")),
                      "valid": n.get("valid") is not False, "done": n.get("done") is True,
                      "success": n.get("success") is True, "failed": n.get("failed") is True,
                      "kept": n.get("kept") is True})
    return {"step": rec["step"], "task": text(rec.get("task"), 500), "strategy": text(rec.get("strategy"), 50),
            "scorer": text(rec.get("scorer"), 50), "nodes": nodes}


def eval_trajectory(rec: Any) -> dict:
    """One line of ``eval_trajectories.jsonl``: a trajectory with ``eval: {"step", "label", "seen"}`` (seen:
    true, false or None when unknown)."""
    t = trajectory(rec)
    ev = rec.get("eval") if isinstance(rec.get("eval"), dict) else {}
    seen = ev.get("seen")
    t["eval"] = {"step": integer(ev.get("step")) if integer(ev.get("step")) is not None else t["step"],
                 "label": text(ev.get("label"), 100), "seen": seen if isinstance(seen, bool) else None}
    return t


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


def warm_step(rec: Any) -> dict:
    """One line of ``warm_start.jsonl``: the behaviour-cloning step, its loss and seconds."""
    if not isinstance(rec, dict) or integer(rec.get("warm_step")) is None or num(rec.get("loss_bc")) is None:
        raise ValueError("not a warm start record")
    return {"k": rec["warm_step"], "loss": num(rec["loss_bc"]), "seconds": num(rec.get("seconds"))}


def searchable(t: dict) -> str:
    """The lower-case text a search looks in: task, request, replies, observations, state keys (the page's
    ``haystack`` in static/summary.js is the same, for single-file pages)."""
    parts = [t["task"]["id"], t["query"], t["task"]["instruction"]]
    for u in t["turns"]:
        parts += [u["action"], u["observation"], u["state_key"]]
    return "\n".join(parts).lower()


def metric(rec: Any) -> dict:
    if not isinstance(rec, dict) or integer(rec.get("step")) is None:
        raise ValueError("not a metrics record")
    out = {"step": rec["step"]}
    out.update({text(k, 200): v for k, v in rec.items() if k != "step" and num(v) is not None})
    return out


# ---- files -------------------------------------------------------------------------------------------------

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


def llm_call(rec: Any) -> dict:
    if not isinstance(rec, dict) or integer(rec.get("step")) is None:
        raise ValueError("not an llm call record")
    return {"step": rec["step"], "purpose": text(rec.get("purpose"), 100), "output": text(rec.get("output"))}


def config_facts(cfg: dict) -> list[list[str]]:
    """The few settings that say what a run was, as ``[key, value]`` pairs."""
    facts = []
    for path in CONFIG_KEYS:
        node: Any = cfg
        for k in path:
            node = node.get(k) if isinstance(node, dict) else None
        if node is not None and not isinstance(node, (dict, list)):
            facts.append([".".join(path), text(node, 200)])
    return facts


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
