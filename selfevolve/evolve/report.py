"""The evolve run's report, rewritten after every round: ``evolve.json`` (the state, every figure), ``evolve.md``
(a page per run: what it saw, then per round the explorations, the tasks proposed and kept by each filter, the
pool and its success-rate histogram, imitation and RL figures, held-out success) and ``evolve.png`` (held-out
success per round, and the pool's size)."""

from __future__ import annotations

import json
import time
from pathlib import Path

MARKDOWN, JSON, FIGURE = "evolve.md", "evolve_report.json", "evolve.png"
MEANS = ("reward/mean", "success/rate", "valid/rate", "entropy", "loss/imitation", "imitation/rows",
         "imitation/ratio", "imitation/clipped", "pool/p_mean", "pool/drawn_from")


def seconds_since(t0: float) -> float:
    """Seconds since ``time.perf_counter()`` read ``t0``, as a stage's record keeps them: to the millisecond, so that
    a stage faster than a tenth of a second (a one-step cloning of a tiny model) is not recorded as 0."""
    return round(time.perf_counter() - t0, 3)


def train_figures(train_dir: Path) -> dict[str, float]:
    """A round's RL figures from its ``metrics.jsonl``: updates, the mean of each of ``MEANS`` over them, and the
    rollout, update and held-out evaluation seconds."""
    path = train_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    steps = [m for m in rows if m.get("step", 0) >= 1]
    out: dict[str, float] = {"updates": len(steps)}
    for key in MEANS:
        vals = [m[key] for m in steps if isinstance(m.get(key), (int, float))]
        if vals:
            out[key] = round(sum(vals) / len(vals), 4)
    for key in ("time/rollout", "time/update", "time/eval"):
        out[key] = round(sum(m.get(key, 0.0) for m in steps), 1)
    return out


def metric_sum(train_dir: Path, key: str) -> float:
    """The sum of one metric over a round's updates."""
    path = train_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    return float(sum(m.get(key, 0.0) for m in rows if m.get("step", 0) >= 1))


def curve(state: dict) -> list[tuple[str, float | None, int]]:
    """``(label, held-out success, pool size)``: before round 0, then after each round."""
    points = []
    if state.get("start_eval"):
        points.append(("start", state["start_eval"].get("eval/success"), 0))
    for rec in state["rounds"]:
        if "trained" in rec.get("stages", []):
            points.append((f"round {rec['round']}", rec.get("eval", {}).get("eval/success"),
                           rec.get("pool", {}).get("tasks", 0)))
    return points


def best_round(rounds: list[dict]) -> int | None:
    """The round kept with ``evolve.keep=best`` (``evolve/validation.py``): the highest validation success, the
    latest round on a tie; None when no round was scored."""
    scored = [(r["validation"]["success"], r["round"]) for r in rounds if "success" in r.get("validation", {})]
    return max(scored)[1] if scored else None


def summary(state: dict) -> dict:
    """``final``: the held-out success of the policy the run keeps — the kept round's (``kept_round``, with
    ``evolve.keep=best``; ``evolve/validation.py``), else the last round's (``last``)."""
    pts = curve(state)
    done = [r for r in state["rounds"] if "trained" in r.get("stages", [])]
    k = best_round(done)
    last = pts[-1][1] if pts else None
    by_round = {r["round"]: r for r in done}
    kept = {"kept_round": k, "kept": by_round[k]["eval"].get("eval/success")} if k is not None else \
        {"kept_round": None}
    return {"rounds": len(done), "start": pts[0][1] if pts and pts[0][0] == "start" else None,
            "final": kept["kept"] if k is not None else last, "last": last, **kept,
            "pool": pts[-1][2] if pts else 0, "curve": [{"point": p, "success": s, "pool": n} for p, s, n in pts]}


def seconds_by_stage(state: dict) -> list[tuple[str, float]]:
    """Where the run's time went (issue 41 item 5 asks what the loop costs), summed over the rounds trained:
    the evaluation before round 0, writing the validation set, then per round exploring, writing tasks,
    behaviour cloning, RL rollouts and updates, the held-out evaluation and the validation score; "the rest" of a
    round's training stage is loading the model and writing checkpoints. Runs recorded before these timings
    existed count their cloning under the rest; a round resumed mid-training times only its last attempt's
    training stage, so there the rest is the part of it its parts do not cover, or 0."""
    rounds = [r for r in state.get("rounds", []) if "trained" in r.get("stages", [])]

    def total(stage: str, key: str) -> float:
        return sum(float(r.get(stage, {}).get(key, 0.0)) for r in rounds)

    parts = {"behaviour cloning": total("bc", "bc/seconds"), "RL rollouts": total("train", "time/rollout"),
             "RL updates": total("train", "time/update"),
             "held-out evaluation after each round": total("train", "time/eval")}
    rest = max(0.0, total("train", "seconds") - sum(parts.values()))
    return [("held-out evaluation before round 0", float(state.get("start_eval_seconds", 0.0))),
            ("writing the validation set", float(state.get("validation", {}).get("seconds", 0.0))),
            ("exploring", total("explore", "seconds")), ("writing tasks", total("write", "seconds")),
            *parts.items(), ("the rest of training (loading, checkpoints)", rest),
            ("validation score after each round", total("validation", "seconds"))]


HINDSIGHT_FORMS = {  # evolve.hindsight, in the report's words
    "goal": "each reached state became its map's or room's own goal: the ordinary game of a relabelled instance",
    "cell": "a request naming the reached cell, marked T",
}


def saw(state: dict) -> list[str]:
    """What the run saw (issue 41 item 3), from its records."""
    rounds = state["rounds"]
    seeds = sorted({s for r in rounds for s in r.get("explore", {}).get("sandbox_seeds", [])})
    kept = sum(r.get("write", {}).get("kept", 0) for r in rounds)
    writers: dict[str, int] = {}
    for r in rounds:
        for w, n in r.get("write", {}).get("kept_per_writer", {}).items():
            writers[w] = writers.get(w, 0) + n
    span = f"seeds {seeds[0]}–{seeds[-1]}" if seeds else "none"
    form = state.get("config", {}).get("evolve", {}).get("hindsight")
    notes = [f"- hindsight form: `{form}` ({HINDSIGHT_FORMS[form]});"] if form in HINDSIGHT_FORMS else []
    ev = state.get("config", {}).get("evolve", {})
    if ev.get("explorer") == "random":
        masked = ev.get("explore_constrained", True)
        among = "those the masked explorer may answer" if masked else "all the game's moves"
        notes.append(f"- explorer: **uniform random moves** among {among}, no model (`evolve.explorer=random`, a "
                     "diagnostic: the explorations are not the agent's own);")
    val = state.get("validation", {})
    if val.get("tasks"):
        lo, hi = val["sandboxes"]
        apart = " (none holds a map or room a round explores)" if "left_out" in val else ""
        notes.append(f"- validation, to choose the round kept: {val['tasks']} hindsight tasks of {val['min_moves']}+ "
                     f"moves from random-move explorations of training sandboxes {lo}–{hi}{apart};")
    updates = sum(r.get("train", {}).get("updates", 0) for r in rounds)
    rollouts = sum(r.get("train", {}).get("rollouts", 0) for r in rounds)
    if ev.get("rl", True):
        notes.append(f"- RL: {updates} updates on {rollouts} rollouts of pool tasks;")
    else:
        notes.append("- RL: **none** (`evolve.rl=false`: each round only clones the pool's references, so the pool's "
                     "counts, and with them the learnability draw, stay at the prior);")
    return [
        f"- environment: `{state.get('env')}`, its rules and its verifier;",
        f"- training instances with no goal given: {len(seeds)} exploration sandboxes (`split=train`, {span});",
        f"- tasks trained on: {kept} written by the agent ({', '.join(f'{w}: {n}' for w, n in writers.items()) or 'none'}),"
        " each verified by replaying its reference; **0 human-written training tasks** (the rounds' environments"
        " play only the pool, `split=synth`);",
        *notes,
        "- expert (BFS) episodes: **0** (`train.warm_start_steps` is not used; behaviour cloning is on the pool's"
        " own reference paths);",
        "- prompt examples: the environment's one format example (its few-shot turns on a hand-made board);",
        "- held-out evaluation: the environment's test split (content-disjoint from training), for evaluation only.",
    ]


def _pct(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def markdown(state: dict) -> str:
    lines = [f"# selfevolve evolve: {state.get('env')}", "", "## What the run saw", "", *saw(state), "",
             "## Held-out success per round", "",
             "| point | held-out success | validation success | pool tasks |", "|---|---:|---:|---:|"]
    scores = {f"round {r['round']}": r.get("validation", {}).get("success") for r in state["rounds"]}
    lines += [f"| {p} | {_pct(s)} | {_pct(scores.get(p))} | {n} |" for p, s, n in curve(state)]
    lines += ["", kept_line(state)]
    lines += time_table(state)
    for rec in state["rounds"]:
        r = rec["round"]
        lines += ["", f"## Round {r}", ""]
        ex = rec.get("explore")
        if ex:
            extra = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in ex.items()
                              if k not in ("explorations", "answers", "valid_answers", "sandbox_seeds",
                                           "explorations_with_a_valid_answer", "seconds"))
            lines.append(f"- explored: {ex['explorations']} explorations, {ex['valid_answers']} valid answers of "
                         f"{ex['answers']}, {ex['explorations_with_a_valid_answer']} explorations with one"
                         + (f"; {extra}" if extra else "") + f" ({ex.get('seconds', 0):.1f} s)")
        wr = rec.get("write", {})
        if "skipped" in wr:
            lines.append(f"- tasks: none written ({wr['skipped']})")
        elif wr:
            removed = ", ".join(f"{k} {v}" for k, v in wr["removed"].items())
            lines.append(f"- tasks: {wr['candidates']} proposed ({_kv(wr.get('candidates_per_writer', {}))}); "
                         f"removed: {removed}; kept {wr['kept']} ({_kv(wr.get('kept_per_writer', {}))}); "
                         f"intents {_kv(wr.get('intents', {}))}")
        pool = rec.get("pool", {})
        if pool:
            hist = pool.get("histogram")
            lines.append(f"- pool: {pool.get('tasks', 0)} tasks" + (f"; success-rate histogram {_kv(hist)}" if hist
                                                                     else "")
                         + (f"; {pool['buffered']} successes buffered for replay" if "buffered" in pool else ""))
        bc = rec.get("bc")
        if bc:
            among = (f" drawn from the {bc['bc/tasks']} tasks of {bc['bc/min_moves']}+ moves" if "bc/tasks" in bc
                     else "")
            lines.append(f"- behaviour cloning: {bc['bc/steps']} steps on {bc['bc/demonstrations']} reference "
                         f"demonstrations{among} ({bc['bc/demonstrations_solved']} solved), loss "
                         f"{bc['bc/loss_first']:.3f} → {bc['bc/loss_last']:.3f}")
        tr = rec.get("train", {})
        if tr and "skipped" not in tr:
            lines.append("- RL: " + _kv({k: round(v, 1) if k == "seconds" or k.startswith("time/") else v
                                         for k, v in tr.items()}))
        ev = rec.get("eval")
        if ev:
            lines.append("- held-out: " + _kv({k: round(v, 3) if isinstance(v, float) else v for k, v in ev.items()
                                               if k.startswith("eval/")}))
        val = rec.get("validation")
        if val:
            lines.append(f"- validation: success {val['success']:.3f} on {val['tasks']} tasks "
                         f"({val['seconds']:.1f} s)")
    return "\n".join(lines) + "\n"


def time_table(state: dict) -> list[str]:
    """The page's "Where the time went": :func:`seconds_by_stage` with each stage's share (none before a round)."""
    stages = seconds_by_stage(state)
    whole = sum(t for _, t in stages)
    if whole <= 0:
        return []
    return ["", "## Where the time went", "", "| stage | seconds | share |", "|---|---:|---:|",
            *[f"| {name} | {t:.0f} | {t / whole:.0%} |" for name, t in stages if t > 0],
            f"| all stages | {whole:.0f} | |"]


def kept_line(state: dict) -> str:
    """Which round's policy the run keeps, and why."""
    s, v = summary(state), state.get("validation", {})
    if s["kept_round"] is not None:
        k = s["kept_round"]
        return (f"**Kept: round {k}**, the highest validation success; held-out success "
                f"{_pct(s['kept'])} (the last round: {_pct(s['last'])}); its policy: `round-{k}/train`.")
    keep = state.get("config", {}).get("evolve", {}).get("keep")
    why = v.get("skipped") or ("`evolve.keep=last`" if keep == "last" else
                               "no validation set: the run began before `evolve.keep`" if not v else "no round scored")
    return f"**Kept: the last round** ({why})."


def _kv(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"


def figure(state: dict, path: Path) -> None:
    """Held-out success per round (line) and the pool's size (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = curve(state)
    if not pts:
        return
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    xs = range(len(pts))
    ax2 = ax.twinx()
    ax2.bar(xs, [n for _, _, n in pts], color="#dde6f0", width=0.5, zorder=0)
    ax2.set_ylabel("pool tasks")
    ax.set_zorder(ax2.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.plot(xs, [s if s is not None else float("nan") for _, s, _ in pts], marker="o", color="#1f5fa8")
    ax.set_xticks(list(xs), [p for p, _, _ in pts])
    ax.set_ylabel("held-out greedy success")
    ax.set_ylim(0, 1)
    ax.set_title(f"selfevolve evolve: {state.get('env')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: Path, state: dict) -> None:
    (out / JSON).write_text(json.dumps({"summary": summary(state), **state}, indent=1))
    (out / MARKDOWN).write_text(markdown(state))
    figure(state, out / FIGURE)
