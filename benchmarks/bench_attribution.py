"""Self-attributing (AgentEvolver's ADCA) against ground truth: how good is an LLM step judge, and what does
attribution do to learning — GRPO vs GRPO + LLM attribution vs GRPO + oracle attribution.

Two parts, sharing one behaviour-cloning warm start per environment and seed (``{env}-s{seed}-warm``, as in
``bench_credit.py``):

``judge``: one batch of training rollouts (``Trainer.collect()``: 4 tasks x 8 sampled rollouts by default, the
batch an RL update would see) of the warm-started policy — of the untrained one for the environments not in
``--warm-envs``: a behaviour-cloning step on the tool worlds' long prompts took about 30 minutes on this CPU — is
judged by ``--judge`` (default ``smollm2-135m``, no adapter) with the attribution prompt of
``selfevolve/rewards/attribution.py`` (the same ``Attributor`` the trainer runs) and labelled by the
environment's oracle. The batch is kept in ``{env}-s{seed}-sample.jsonl`` and reused by later runs. Per environment: step accuracy, balanced accuracy, GOOD/BAD recall, earliest-error accuracy
on failed trajectories, labels defaulted, seconds per trajectory — and the same figures for the outcome rule
(every step labelled with the episode's outcome: the judge's own default, a baseline any judge must beat). Writes ``judged-{env}.jsonl`` (every step with
its action, result, the judge's label and rationale, the oracle's label and both advantages: plain GRPO and
GRPO + attribution) and ``judge-{env}/llm_calls.jsonl`` (the raw replies).

``learn``: from the warm start, each method gets the same number of RL updates (same seeds, same tasks);
greedy eval success on held-out tasks at the end, the training rollouts' success, and the judge's cost per
update (seconds and calls) beside it.

    python benchmarks/bench_attribution.py judge --envs frozenlake sokoban
    python benchmarks/bench_attribution.py judge --envs shop tables --tasks-per-step 2    # untrained policy
    python benchmarks/bench_attribution.py judge --envs shop --scripted 16     # reference / detour / wrong answer
    python benchmarks/bench_attribution.py judge --envs frozenlake --extra attribution.constrained=true \
        --tag=-constrained                                                     # the same batch, constrained judge
    python benchmarks/bench_attribution.py learn --envs frozenlake shop --seeds 0 1 2 --steps 20
    python benchmarks/bench_attribution.py learn --envs frozenlake --seeds 0 --steps 4 --episodes 32   # what fits

Runs go to ``--out`` (default runs/bench_attribution); finished runs are skipped, unfinished ones resume. Each part
writes ``summary-{part}.json`` (judge: ``summary-judge-{envs}[-scripted].json``), prints a markdown table and a final SUMMARY line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_credit  # noqa: E402 - the shared runner: warm starts, resumable runs, the eval summary

METHODS = {
    "grpo": ["algo.name=grpo"],
    "grpo+llm": ["algo.name=grpo", "reward.attribution=llm"],
    "grpo+oracle": ["algo.name=grpo", "reward.attribution=oracle"],
}
# per-environment overrides: a tool call needs a longer reply than a move
ENV_EXTRA = {"shop": ["agent.max_new_tokens=64"], "tables": ["agent.max_new_tokens=64"]}


def load_trajectories(path: Path, step: int | None = None):
    """Trajectories of ``trajectories.jsonl`` (of one step, or all), rebuilt with what the judge and the oracle
    read: actions, observations, state keys, info, rewards, outcome, group."""
    from selfevolve.types import Step, Task, Trajectory

    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if step is not None and rec["step"] != step:
            continue
        steps = [Step(prompt_ids=[], action_ids=[], logprobs=[], action_text=s["action_text"],
                      observation=s["observation"], reward=s["reward"], done=s["done"], valid=s["valid"],
                      state_key=s["state_key"], info={k: v for k, v in s["info"].items() if k != "attribution"})
                 for s in rec["steps"]]
        traj = Trajectory(task=Task(**rec["task"]), steps=steps, group_id=rec["group_id"], success=rec["success"])
        traj.set_marks(rec["flags"])
        out.append(traj)
    return out


# a call that fails in every task of the world (an unknown id or table): the detour of scripted episodes
FAILING_CALL = {"shop": ("get_order", {"order_id": "#W0000000"}), "tables": ("load_table", {"table": "no_such_table"})}


def scripted_episodes(env_name: str, n_tasks: int) -> tuple[list, list[str]]:
    """``(trajectories, the source of each)``. Tool worlds, where the untrained policy's rollouts hold no GOOD step to find (every one of its shop steps
    is BAD by the oracle): per training task 0, 1, ..., three episodes played in a fresh world, one group:
    ``reference`` (its reference solution: every call GOOD), ``detour`` (the reference with a failing call put
    before its last call: that call BAD) and ``wrong_answer`` (the reference's calls, then ``finish`` with an
    answer that says nothing found: BAD where the task's answer matters). The oracle labels them like rollouts."""
    from selfevolve.envs import make_env
    from selfevolve.rollout.runner import request_of
    from selfevolve.types import Step, Task, Trajectory
    from selfevolve.envs.tools.calls import format_tool_call

    failing = format_tool_call(*FAILING_CALL[env_name])
    give_up = format_tool_call("finish", {"answer": "I could not find it."})
    out, sources = [], []
    for seed in range(n_tasks):
        env = make_env(env_name)  # the train split: the oracle replays a trajectory's task seed there
        env.reset(seed)
        calls = [c.text() for c in env.reference_calls()]
        variants = {"reference": calls, "detour": calls[:-1] + [failing] + calls[-1:],
                    "wrong_answer": calls[:-1] + [give_up]}
        for source, actions in variants.items():
            env = make_env(env_name)
            first = env.reset(seed)
            task = Task(id=f"{env_name}-train-{seed}", env=env_name, seed=seed)
            query, reference = request_of(env, first)
            traj = Trajectory(task=task, group_id=task.id, query=query, reference=reference)
            for action in actions:
                res = env.step(action)
                traj.steps.append(Step(prompt_ids=[], action_ids=[], logprobs=[], action_text=action,
                                       observation=res.observation, reward=float(res.reward), done=bool(res.done),
                                       valid=bool(res.info.get("valid_action", True)), state_key="",
                                       info={k: v for k, v in res.info.items() if k in ("tool_call", "success")}))
                traj.success = bool(res.info.get("success", False))
                if res.done:
                    break
            out.append(traj)
            sources.append(source)
    return out, sources


def common_overrides(args, env: str) -> list[str]:
    return [f"model.name={args.model}", f"env.name={env}", *ENV_EXTRA.get(env, []), *args.extra]


def warm_job(args, env: str, seed: int):
    name = f"{env}-s{seed}-warm"
    # no evaluation of the untrained model: the start of every curve is the warm start's (warm/success)
    return (name, [*common_overrides(args, env), f"seed={seed}", "train.steps=0", f"eval.episodes={args.episodes}",
                   "eval.at_start=false", f"train.warm_start_steps={args.warm_steps}"], args.out / name, 0)


def run_jobs(jobs, args) -> dict[str, float]:
    from concurrent.futures import ThreadPoolExecutor

    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.workers) as pool:
        futures = {job[0]: pool.submit(bench_credit.run_job, *job, args.threads, logs) for job in jobs}
        return {name: f.result() for name, f in futures.items()}


# ---- judge --------------------------------------------------------------------------------------------------------
def judge(args) -> None:
    import torch

    from selfevolve.config import load_config
    from selfevolve.envs import make_env
    from selfevolve.models.llm import LLM
    from selfevolve.rewards.attribution import Attributor
    from selfevolve.rewards.oracle import GOOD, agreement
    from selfevolve.objectives.credit import credit_batch, step_advantages

    from selfevolve import Trainer

    seed = args.seeds[0]
    warm = [env for env in args.envs if env in args.warm_envs]
    run_jobs([warm_job(args, env, seed) for env in warm], args)
    torch.set_num_threads(args.threads)
    for env in args.envs:  # one batch of training rollouts per environment, kept for later runs
        sample = args.out / f"{env}-s{seed}-sample.jsonl"
        if sample.is_file() or (args.scripted and env in FAILING_CALL):
            continue
        t0 = time.perf_counter()
        trainer = Trainer(load_config(overrides=[
            *common_overrides(args, env), f"seed={seed}", f"train.tasks_per_step={args.tasks_per_step}",
            f"algo.group_size={args.group_size}", f"train.out_dir={args.out / f'{env}-s{seed}-sample'}",
            "train.overwrite=true", "train.progress=false",
            *([f"model.init_from={args.out / f'{env}-s{seed}-warm'}"] if env in warm else [])]))
        trajs, _ = trainer.collect()
        sample.write_text("".join(json.dumps({"step": 1, **t.to_dict(with_ids=False)}) + "\n" for t in trajs))
        print(f"[{time.strftime('%H:%M:%S')}] {env}: {len(trajs)} rollouts in {time.perf_counter() - t0:.0f} s",
              flush=True)
        del trainer

    llm = LLM(args.judge, log_dir=None, max_new_tokens=512, batch_size=args.judge_batch)
    results = {}
    for env in args.envs:
        cfg = load_config(overrides=[*common_overrides(args, env), "reward.attribution=llm",
                                     f"attribution.alpha={args.alpha}",
                                     f"attribution.tokens_per_step={args.tokens_per_step}"])
        scripted = bool(args.scripted) and env in FAILING_CALL
        if scripted:
            trajs, sources = scripted_episodes(env, args.scripted)
        else:
            trajs = load_trajectories(args.out / f"{env}-s{seed}-sample.jsonl")[: args.trajectories]
            sources = ["rollout"] * len(trajs)
        name = (f"{env}-scripted" if scripted else env) + args.tag
        log_dir = args.out / f"judge-{name}"
        log_dir.mkdir(exist_ok=True)
        (log_dir / "llm_calls.jsonl").unlink(missing_ok=True)
        llm.log_path = log_dir / "llm_calls.jsonl"
        attributor = Attributor("llm", cfg.attribution, make_env(env, **cfg.env.options()), llm)
        t0 = time.perf_counter()
        metrics = attributor(trajs, step=1)
        seconds = time.perf_counter() - t0
        pred = [[s.info["attribution"]["label"] == GOOD for s in t.steps] for t in trajs]
        truth = [[s.info["attribution"]["oracle"] == GOOD for s in t.steps] for t in trajs]
        agree = agreement(pred, truth, [not t.success for t in trajs])
        # the judge's own fallback as a judge: every step labelled with the outcome's polarity
        polar = agreement([[t.success] * len(t.steps) for t in trajs], truth, [not t.success for t in trajs])
        # the advantages a training step would give these trajectories: plain GRPO and GRPO + attribution
        batch, _ = credit_batch(trajs, cfg, vocab_size=1)
        attributed, _ = step_advantages("grpo", batch, cfg.algo, cfg.attribution)
        batch.step_labels = None
        plain, _ = step_advantages("grpo", batch, cfg.algo, cfg.attribution)
        with (args.out / f"judged-{name}.jsonl").open("w") as f:
            for t, source, a, p in zip(trajs, sources, batch.per_step(attributed), batch.per_step(plain)):
                f.write(json.dumps({"task": t.task.id, "group": t.group_id, "success": t.success, "reward": t.reward,
                                    "query": t.query or "", "source": source,
                                    "steps": [
                                        {"action": s.action_text, "observation": s.observation, **s.info["attribution"],
                                         "advantage": round(x, 4), "grpo_advantage": round(y, 4)}
                                        for s, x, y in zip(t.steps, a, p)]}) + "\n")
        n_steps = sum(len(t.steps) for t in trajs)
        results[name] = {**agree, "trajectories": len(trajs), "failed": sum(not t.success for t in trajs),
                        "defaulted": metrics["attribution/defaulted"] / max(1, n_steps),
                        "unparsed_replies": metrics["attribution/unparsed"], "bare_replies": metrics["attribution/bare"],
                        "seconds": seconds, "seconds_per_trajectory": seconds / max(1, len(trajs)),
                        "outcome_rule": {k: polar[k] for k in ("accuracy", "balanced_accuracy", "first_error_accuracy")
                                         if k in polar}}
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {json.dumps(results[name])}", flush=True)
    summary = args.out / f"summary-judge-{'-'.join(args.envs)}{'-scripted' if args.scripted else ''}{args.tag}.json"
    summary.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1))
    print("| env | trajectories (failed) | steps | oracle GOOD | judge GOOD | accuracy | balanced accuracy | "
          "GOOD recall | BAD recall | earliest error (n) | defaulted | s / trajectory | outcome rule: accuracy, "
          "balanced, earliest error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for env, r in results.items():
        first = "-" if "first_error_accuracy" not in r else f"{r['first_error_accuracy']:.3f} ({r['failed_with_error']})"
        print(f"| {env} | {r['trajectories']} ({r['failed']}) | {r['steps']} | {r.get('oracle_good_share', 0):.3f} | "
              f"{r.get('good_share', 0):.3f} | {r.get('accuracy', 0):.3f} | {r.get('balanced_accuracy', 0):.3f} | "
              f"{r.get('good_recall', float('nan')):.3f} | {r.get('bad_recall', float('nan')):.3f} | {first} | "
              f"{r['defaulted']:.3f} | {r['seconds_per_trajectory']:.1f} | "
              f"{', '.join(f'{v:.3f}' for v in r['outcome_rule'].values())} |")
    line = "; ".join(f"{env} acc {r.get('accuracy', 0):.3f} bal {r.get('balanced_accuracy', 0):.3f} first-error "
                     f"{r.get('first_error_accuracy', float('nan')):.3f}" for env, r in results.items())
    print(f"SUMMARY attribution judge ({args.judge}, {args.trajectories} trajectories per env): {line}")


# ---- learn --------------------------------------------------------------------------------------------------------
def learn(args) -> None:
    jobs = [warm_job(args, env, seed) for env in args.envs for seed in args.seeds]
    walls = run_jobs(jobs, args)
    method_jobs = [(f"{env}-s{seed}-{m}",
                    [*common_overrides(args, env), f"seed={seed}", *METHODS[m],
                     f"model.init_from={args.out / f'{env}-s{seed}-warm'}", "train.warm_start_steps=0",
                     "eval.at_start=false", f"train.steps={args.steps}", f"eval.episodes={args.episodes}",
                     f"train.tasks_per_step={args.tasks_per_step}", f"algo.group_size={args.group_size}",
                     f"train.eval_every={args.eval_every}"], args.out / f"{env}-s{seed}-{m}", args.steps)
                   for env in args.envs for seed in args.seeds for m in args.methods]
    walls.update(run_jobs(method_jobs, args))
    summary = bench_credit.summarise(args, walls)
    for env, ms in summary["results"].items():
        for m, s in ms.items():
            rows = [r for seed in args.seeds for r in bench_credit.read_metrics(args.out / f"{env}-s{seed}-{m}")
                    if r.get("step", 0) > 0]
            cost = [r["attribution/seconds"] for r in rows if "attribution/seconds" in r]
            s["judge_seconds_per_update"] = statistics.mean(cost) if cost else 0.0
            calls = [r["attribution/calls"] for r in rows if "attribution/calls" in r]
            s["judge_calls_per_update"] = statistics.mean(calls) if calls else 0.0
            s["update_seconds_per_update"] = statistics.mean(r.get("time/rollout", 0) + r.get("time/update", 0)
                                                             for r in rows) if rows else 0.0
            acc = [r["attribution/balanced_accuracy"] for r in rows if "attribution/balanced_accuracy" in r]
            s["judge_balanced_accuracy"] = statistics.mean(acc) if acc else None
    (args.out / "summary-learn.json").write_text(json.dumps(summary, indent=1))
    print("| env | method | greedy eval success: warm start | final, mean ± std over seeds | per seed | "
          "training-rollout success, last 3 updates | judge s / update | judge calls / update | s / update | "
          "judge balanced accuracy |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for env, ms in summary["results"].items():
        for m, s in ms.items():
            late = s["train_success_late_per_seed"]
            acc = "-" if s["judge_balanced_accuracy"] is None else f"{s['judge_balanced_accuracy']:.3f}"
            print(f"| {env} | {m} | {s['start_mean']:.3f} | {s['final_mean']:.3f} ± {s['final_std']:.3f} | "
                  f"{', '.join(f'{x:.3f}' for x in s['per_seed_final'])} | {statistics.mean(late):.3f} | "
                  f"{s['judge_seconds_per_update']:.0f} | {s['judge_calls_per_update']:.0f} | "
                  f"{s['update_seconds_per_update']:.0f} | {acc} |")
    finals = "; ".join(f"{env}/{m} {s['final_mean']:.3f}±{s['final_std']:.3f} (judge {s['judge_seconds_per_update']:.0f}"
                       f" s/update)" for env, ms in summary["results"].items() for m, s in ms.items())
    print(f"SUMMARY attribution learning ({len(args.seeds)} seeds, {args.steps} updates, {args.episodes} eval eps): "
          f"{finals}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=["judge", "learn"])
    ap.add_argument("--envs", nargs="+", default=None, help="default: judge frozenlake sokoban shop tables; "
                    "learn frozenlake shop")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="judge uses the first")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--steps", type=int, default=20, help="learn: RL updates per method run")
    ap.add_argument("--tasks-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--episodes", type=int, default=64, help="held-out eval episodes (after the warm start and "
                    "at the end of each method run)")
    ap.add_argument("--warm-steps", type=int, default=10, help="behaviour-cloning steps of the shared warm start")
    ap.add_argument("--warm-envs", nargs="*", default=["frozenlake", "sokoban"],
                    help="judge: environments whose rollouts come from the warm-started policy (others: untrained)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--judge", default="smollm2-135m", help="judge: the model that judges (no adapter)")
    ap.add_argument("--judge-batch", type=int, default=8, help="judge: conversations per generation batch")
    ap.add_argument("--trajectories", type=int, default=32, help="judge: trajectories judged per environment")
    ap.add_argument("--scripted", type=int, default=0, metavar="N",
                    help="judge, tool worlds: judge the scripted episodes of N training tasks (reference, detour, "
                    "wrong answer: 3 each) instead of the sampled batch")
    ap.add_argument("--tokens-per-step", type=int, default=48, help="judge: reply budget per step")
    ap.add_argument("--alpha", type=float, default=0.2, help="judge: alpha of the advantages written out")
    ap.add_argument("--workers", type=int, default=2, help="runs in parallel")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for every run (key=value)")
    ap.add_argument("--tag", default="", help="judge: a suffix for the judged files and the summary (e.g. "
                    "--tag=-constrained, with '=' as the value starts with a dash, and --extra "
                    "attribution.constrained=true: the same batch, judged again)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_attribution"))
    args = ap.parse_args()
    if args.envs is None:
        args.envs = ["frozenlake", "sokoban", "shop", "tables"] if args.part == "judge" else ["frozenlake", "shop"]
    args.out.mkdir(parents=True, exist_ok=True)
    (judge if args.part == "judge" else learn)(args)


if __name__ == "__main__":
    main()
