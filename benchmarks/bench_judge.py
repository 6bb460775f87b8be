"""The LLM judge against the verifier: how often does the judge reward (self-questioning, ``rewards/judge.py``)
agree with the environment's own verdict, on real episodes where both exist?

The judge is the trainer's (``judge_trajectories``: the principles, the worked example, the bands, one retry of
an unreadable reply, then "not achieved"), with the game's rules before a game's first observation. Episodes:

- ``frozenlake`` / ``sokoban``: rollouts from ``trajectories.jsonl`` files of training runs (``--frozenlake``,
  ``--sokoban``): up to ``--per-class`` verified successes and as many failures, drawn with a fixed seed.
- ``shop``: the reference solutions of ``--shop-tasks`` held-out tasks replayed (verified successes), the same
  episodes without their last write and the final answer, replayed again (*near misses*: the verifier says
  failure, and the request was read but not carried out), and any rollout file given (``--shop``, e.g. the untrained policy's).

    python benchmarks/bench_judge.py                                   # smollm2-135m as judge (about 30 min)
    python benchmarks/bench_judge.py --model tiny --per-class 2 --shop-tasks 2 --out runs/bench_judge_smoke

Writes ``--out``/summary.json (accuracy, confusion table, Cohen's κ per source and overall), judged.jsonl (each
episode's score and verdict), llm_calls.jsonl (every judge call), and a final SUMMARY line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_attribution import load_trajectories  # noqa: E402 - rebuilds Trajectory objects from trajectories.jsonl

from selfevolve.envs import make_env  # noqa: E402
from selfevolve.experience.guide import expert_episode  # noqa: E402
from selfevolve.models.llm import LLM  # noqa: E402
from selfevolve.rewards.judge import (FALLBACK_SCORE, achieved, agreement, game_rules,  # noqa: E402
                                      judge_trajectories, parse_reward, read_score, to_band)
from selfevolve.rollout.runner import request_of  # noqa: E402
from selfevolve.types import Step, Task, Trajectory  # noqa: E402

KEPT_STATS = ("judge/malformed", "judge/fallback", "judge/verdict")
DEFAULT_FILES = {
    "frozenlake": "runs/bench_attribution_default/frozenlake-s0-grpo/trajectories.jsonl",
    "sokoban": "runs/bench_attribution/sokoban-s0-sample.jsonl",
    "shop": "runs/bench_attribution/shop-s0-sample.jsonl",
}


def balanced(trajs: list[Trajectory], per_class: int, seed: int) -> list[Trajectory]:
    """Up to ``per_class`` successes and as many failures, drawn without replacement."""
    rng = random.Random(seed)
    wins = [t for t in trajs if t.success]
    losses = [t for t in trajs if not t.success]
    return rng.sample(wins, min(per_class, len(wins))) + rng.sample(losses, min(per_class, len(losses)))


def shop_episodes(n: int, seed_offset: int) -> tuple[list[Trajectory], list[Trajectory]]:
    """Reference solutions of ``n`` held-out shop tasks (successes) and the same without the last two calls
    (the write, if any, and the ``finish``: failures), each played in a fresh environment so that observations
    and verdicts are the world's own: ``(references, near misses)``."""
    references, near_misses = [], []
    for i in range(n):
        seed = seed_offset + i
        env = make_env("shop", split="test")
        first = env.reset(seed)
        task = Task(id=f"shop-test-{seed}", env="shop", seed=seed, intent=getattr(env.task, "intent", None))
        full = expert_episode(env, first, task)
        full.query, full.reference = request_of(env, first)
        if not full.success or len(full.steps) < 2:
            continue
        env = make_env("shop", split="test")
        first = env.reset(seed)
        query, reference = request_of(env, first)
        cut = Trajectory(task=task, query=query, reference=reference)
        for step in full.steps[:max(1, len(full.steps) - 2)]:  # without the last write (if any) and the finish
            obs, reward, done, info = env.step(step.action_text)
            cut.steps.append(Step(prompt_ids=[], action_ids=[], logprobs=[], action_text=step.action_text,
                                        observation=obs, reward=float(reward), done=bool(done),
                                        valid=bool(info.get("valid_action", True))))
            cut.success = bool(info.get("success", False))
        references.append(full)
        near_misses.append(cut)
    return references, near_misses


def rescore(out: Path) -> dict:
    """The agreement of an earlier run re-read from its logged replies with today's :func:`read_score` (no model
    call). Exact for the judge as it stands: a first reply the old parser could not read was retried, and the
    retry (same conversation: the bad reply, then the format asked again) is what the judge sends today for a
    reply without a score or a verdict."""
    rows = [json.loads(line) for line in (out / "judged.jsonl").read_text().splitlines()]
    calls = iter([json.loads(line) for line in (out / "llm_calls.jsonl").read_text().splitlines()])
    results, everything = {}, ([], [])
    for name in dict.fromkeys(r["source"] for r in rows):
        mine = [r for r in rows if r["source"] == name]
        first = [next(calls) for _ in mine]
        assert all(c["purpose"] == "judge" for c in first), f"{name}: the log is not in the run's order"
        old_bad = [i for i, c in enumerate(first) if parse_reward(c["output"]) is None]
        retry = {i: next(calls)["output"] for i in old_bad}
        scores, stats = [], {"judge/malformed": 0, "judge/fallback": 0, "judge/verdict": 0}
        for i, c in enumerate(first):
            score, verdict = read_score(c["output"])
            if score is None:
                stats["judge/malformed"] += 1
                score, verdict = read_score(retry[i])
            stats["judge/fallback"] += score is None
            stats["judge/verdict"] += verdict
            scores.append(to_band(FALLBACK_SCORE if score is None else score) / 100)
        verified = [r["verified"] for r in mine]
        judged = [achieved(x) for x in scores]
        everything[0].extend(judged)
        everything[1].extend(verified)
        results[name] = {**agreement(judged, verified), "mean_score": round(sum(scores) / len(scores), 3),
                         **{k.split("/")[-1]: v for k, v in stats.items()}}
    results["all"] = agreement(*everything)
    return results


def print_table(results: dict, model: str) -> None:
    print("| source | episodes | verified successes | judge accuracy | κ | tp | fp | fn | tn | by verdict | unreadable |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['n']} | {r['tp'] + r['fn']} | {r['accuracy']:.3f} | {r['kappa']:.3f} | {r['tp']} | "
              f"{r['fp']} | {r['fn']} | {r['tn']} | {r.get('verdict', '')} | {r.get('fallback', '')} |")
    a = results["all"]
    print(f"SUMMARY model={model} episodes={a['n']} accuracy={a['accuracy']:.3f} kappa={a['kappa']:.3f} "
          f"precision={a['precision']:.3f} recall={a['recall']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m", help="the judge (the untrained model: no adapter)")
    ap.add_argument("--frozenlake", default=DEFAULT_FILES["frozenlake"])
    ap.add_argument("--sokoban", default=DEFAULT_FILES["sokoban"])
    ap.add_argument("--shop", default=DEFAULT_FILES["shop"])
    ap.add_argument("--per-class", type=int, default=100, help="successes (and failures) per rollout file")
    ap.add_argument("--shop-tasks", type=int, default=40, help="held-out shop tasks played by their reference")
    ap.add_argument("--seed-offset", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=8, help="judge conversations per generate call")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="the judge's reply budget (as the trainer's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench_judge"))
    ap.add_argument("--rescore", action="store_true",
                    help="re-read --out's logged replies with today's parser (no model call); writes summary-rescored.json")
    args = ap.parse_args()
    if args.rescore:
        results = rescore(args.out)
        (args.out / "summary-rescored.json").write_text(json.dumps(results, indent=2))
        print_table(results, args.model)
        return
    args.out.mkdir(parents=True, exist_ok=True)

    sources: dict[str, list[Trajectory]] = {}
    for env_name in ("frozenlake", "sokoban"):
        path = Path(getattr(args, env_name))
        if path.is_file():
            sources[env_name] = balanced(load_trajectories(path), args.per_class, args.seed)
        else:
            print(f"{env_name}: {path} not found, skipped", flush=True)
    sources["shop/reference"], sources["shop/near_miss"] = shop_episodes(args.shop_tasks, args.seed_offset)
    if Path(args.shop).is_file():
        sources["shop/policy"] = balanced(load_trajectories(Path(args.shop)), args.per_class, args.seed)

    log = args.out / "llm_calls.jsonl"
    log.unlink(missing_ok=True)
    llm = LLM(args.model, log_dir=args.out, max_new_tokens=args.max_new_tokens, batch_size=args.batch)
    results, rows, everything = {}, [], ([], [])
    for name, trajs in sources.items():
        env_name = name.split("/")[0]
        t0 = time.perf_counter()
        scores, stats = judge_trajectories(llm, trajs, rules=game_rules(make_env(env_name)),
                                           max_new_tokens=args.max_new_tokens)
        seconds = time.perf_counter() - t0
        judged = [achieved(s) for s in scores]
        verified = [bool(t.success) for t in trajs]
        everything[0].extend(judged)
        everything[1].extend(verified)
        results[name] = {**agreement(judged, verified), "seconds": round(seconds, 1),
                         "mean_score": round(sum(scores) / max(len(scores), 1), 3),
                         **{k.split("/")[-1]: v for k, v in stats.items() if k in KEPT_STATS}}
        rows += [{"source": name, "task": t.task.id, "verified": v, "score": s, "achieved": j, "steps": len(t.steps)}
                 for t, s, j, v in zip(trajs, scores, judged, verified)]
        r = results[name]
        print(f"{name}: n={r['n']} accuracy {r['accuracy']:.3f} kappa {r['kappa']:.3f} tp/fp/fn/tn "
              f"{r['tp']}/{r['fp']}/{r['fn']}/{r['tn']} fallback {r.get('fallback', 0)} in {seconds:.0f} s", flush=True)
    results["all"] = agreement(*everything)
    (args.out / "judged.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (args.out / "summary.json").write_text(json.dumps(results, indent=2))

    print_table(results, args.model)


if __name__ == "__main__":
    main()
