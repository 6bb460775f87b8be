"""One record of a run folder rebuilt, field by field, into the shape the viewer's page shows (``load.py`` reads
the files): a string where text is expected (long text cut), a finite number or None where a number is, lists of
equal length for token statistics. A record of the wrong shape raises ValueError (or TypeError, AttributeError),
which the reader counts as a skipped line."""

from __future__ import annotations

import json
import math
from typing import Any

MAX_TEXT = 200_000  # characters of one text field shown; a crafted megabyte reply is cut, not rendered whole
MAX_NODES = 20_000  # nodes of one search tree drawn
CONFIG_KEYS = (("model", "name"), ("env", "name"), ("env", "size"), ("algo", "name"), ("algo", "group_size"),
               ("train", "tasks_per_step"), ("train", "steps"), ("rollout", "search"), ("search", "scorer"),
               ("reward", "shaping"), ("reward", "source"), ("experience", "recall"), ("experience", "navigate"),
               ("agent", "context"), ("seed",))


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


def warm_step(rec: Any) -> dict:
    """One line of ``warm_start.jsonl``: the behaviour-cloning step, its loss and seconds."""
    if not isinstance(rec, dict) or integer(rec.get("warm_step")) is None or num(rec.get("loss_bc")) is None:
        raise ValueError("not a warm start record")
    return {"k": rec["warm_step"], "loss": num(rec["loss_bc"]), "seconds": num(rec.get("seconds"))}


def metric(rec: Any) -> dict:
    if not isinstance(rec, dict) or integer(rec.get("step")) is None:
        raise ValueError("not a metrics record")
    out = {"step": rec["step"]}
    out.update({text(k, 200): v for k, v in rec.items() if k != "step" and num(v) is not None})
    return out


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
