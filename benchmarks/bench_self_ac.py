"""Self-AC's single pass against what it replaces: one update step's time and peak memory, by episode length.

The same batch of episodes (``--episodes`` of n turns, real FrozenLake prompts in the model's chat format) is
trained four ways:

- ``self_ac``      selfevolve's ``algo.name=self_ac``: the shadow prompt, actor and critic in ONE forward per episode;
- ``per_turn``     the same actor-critic with one critic forward per state (``algo.self_ac.forward=per_turn``);
- ``ppo_separate`` PPO with a separate critic model (a second copy of the model, its own LoRA and value head):
                   a no-grad critic pass for the rollout-time values, then actor and critic forwards;
- ``ppo_shared``   selfevolve's ``algo.name=ppo`` (value head on the actor's own body, read at each turn's last
                   prompt token): a no-grad values pass, then one forward;
- ``grpo``         no critic at all (the floor: one actor forward).

Each (method, n) runs in a fresh process, so its memory is its own: "peak" is the highest resident set size
sampled every 5 ms during the updates, minus the process's size just before the first one (model(s) loaded,
episodes built). Time is the median of ``--repeats`` updates after one warm-up update.

    python benchmarks/bench_self_ac.py --model smollm2-135m --turns 2 5 10 --episodes 4 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

METHODS = ("self_ac", "per_turn", "ppo_separate", "ppo_shared", "grpo")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class PeakRss:
    """Samples this process's resident set size in a thread; ``peak`` is the highest value seen."""

    def __init__(self, every: float = 0.005):
        self.every, self.peak, self._stop = every, rss_mb(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb())
            time.sleep(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())


def episodes(cfg, policy, builder, n_turns: int, count: int):
    """``count`` trajectories of exactly ``n_turns`` turns: real FrozenLake observations in the chat template,
    a one-word reply per turn, reward 1 at the end of every other episode."""
    from selfevolve.envs import FrozenLakeEnv, make_env
    from selfevolve.types import Step, Task, Trajectory

    tok = policy.tokenizer
    reply = list(tok.encode("Right", add_special_tokens=False)) + [builder.eot_id()]
    out = []
    for i in range(count):
        env = make_env(FrozenLakeEnv)
        obs = env.reset(i)
        prompt = builder.prompt_ids([obs], [])
        steps = []
        for k in range(n_turns):
            last = k == n_turns - 1
            steps.append(Step(prompt_ids=prompt, action_ids=reply, logprobs=[-0.5] * len(reply), observation=obs,
                              reward=float(last and i % 2 == 0), done=last))
            prompt = builder.extend(prompt, reply, obs)
        out.append(Trajectory(task=Task(id=str(i), env="frozenlake", seed=i), steps=steps, group_id="g"))
    return out


def worker(method: str, n_turns: int, args) -> dict:
    import torch

    from selfevolve.algos.loss import ppo_clip_loss, value_loss
    from selfevolve.config import load_config
    from selfevolve.envs import FrozenLakeEnv
    from selfevolve.objectives import value_head_kind
    from selfevolve.objectives.samples import build_rows, collate, micro_batches
    from selfevolve.objectives.self_ac.update import self_ac_update
    from selfevolve.objectives.self_ac.shadow import build_shadow_episode, critic_prompt_ids, final_state_ids
    from selfevolve.train.trainer import build_policy, build_prompt
    from selfevolve.objectives.update import compute_values, ppo_update

    torch.set_num_threads(args.threads)
    name = {"per_turn": "self_ac", "ppo_separate": "ppo", "ppo_shared": "ppo"}.get(method, method)
    cfg = load_config(overrides=[f"model.name={args.model}", f"model.dtype={args.dtype}", f"algo.name={name}",
                                 f"algo.self_ac.forward={'per_turn' if method == 'per_turn' else 'shadow'}"])
    head = value_head_kind(cfg)
    policy = build_policy(cfg, value_head=head if method not in ("ppo_separate", "grpo") else None)
    critic = build_policy(cfg, value_head=head) if method == "ppo_separate" else None
    builder = build_prompt(cfg, policy, FrozenLakeEnv())
    trajs = episodes(cfg, policy, builder, n_turns, args.episodes)
    params = policy.trainable_parameters() + (critic.trainable_parameters() if critic else [])
    opt = torch.optim.AdamW(params, lr=cfg.algo.lr)
    rng = random.Random(0)
    if name == "self_ac":
        cp = critic_prompt_ids(policy.tokenizer, builder.eot_id())
        eps = [build_shadow_episode(t, cp, final_state_ids(t, builder), traj_index=i) for i, t in enumerate(trajs)]
        tokens = sum(len(e) for e in eps)

        def update():
            self_ac_update(policy, opt, eps, cfg.algo, rng)
    else:
        zeros = [[0.0] * n_turns for _ in trajs]
        tokens = sum(len(r) for r in build_rows(trajs, zeros))

        def update():
            if method == "grpo":
                ppo_update(policy, opt, build_rows(trajs, [[1.0] * n_turns for _ in trajs]), cfg.algo, rng)
                return
            # PPO needs the rollout-time values before its update (GAE): one no-grad pass of the critic
            values = compute_values(critic or policy, build_rows(trajs, zeros), cfg.algo.micro_batch_tokens)
            per = {}
            for row, vals in zip(build_rows(trajs, zeros), values):
                for (i, t), v in zip(row.turns, vals):
                    per.setdefault(i, [0.0] * n_turns)[t] = v
            rets = [[float(s.reward) for s in t.steps] for t in trajs]
            rows = build_rows(trajs, zeros, returns=rets, values=[per[i] for i in range(len(trajs))])
            if critic is None:
                ppo_update(policy, opt, rows, cfg.algo, rng, vf_coef=cfg.algo.ppo.vf_coef, vf_clip=cfg.algo.ppo.vf_clip)
                return
            opt.zero_grad(set_to_none=True)
            n_tok = sum(len(r.advantages) for r in rows)
            n_turn = sum(len(r.returns) for r in rows)
            for chunk in micro_batches(rows, cfg.algo.micro_batch_tokens):
                b = collate(chunk, policy.pad_id)
                logp, _, _ = policy.forward_rows(b["input_ids"], b["attention_mask"], b["loss_mask"])
                loss, _ = ppo_clip_loss(logp[None], b["old_logprobs"][None], b["advantages"][None],
                                        torch.ones_like(logp)[None])
                _, _, v = critic.forward_rows(b["input_ids"], b["attention_mask"], None, value_mask=b["value_mask"])
                vloss, _ = value_loss(v, b["old_values"], b["returns"], clip=cfg.algo.ppo.vf_clip)
                (loss * logp.numel() / n_tok + cfg.algo.ppo.vf_coef * vloss * v.numel() / n_turn).backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.algo.max_grad_norm)
            opt.step()

    base = rss_mb()
    times = []
    with PeakRss() as peak:
        update()  # warm-up (first-call costs), not timed; its memory counts (freed memory may stay mapped)
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            update()
            times.append(time.perf_counter() - t0)
    return {"method": method, "turns": n_turns, "seconds": statistics.median(times), "times": times,
            "peak_mb": peak.peak - base, "rss_mb": peak.peak, "tokens": tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--turns", nargs="+", type=int, default=[2, 5, 10])
    ap.add_argument("--episodes", type=int, default=4, help="episodes per update")
    ap.add_argument("--repeats", type=int, default=2, help="timed updates (after one warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--out", default="runs/bench_self_ac.json")
    ap.add_argument("--worker", nargs=2, metavar=("METHOD", "TURNS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker[0], int(args.worker[1]), args)))
        return
    results = []
    for n in args.turns:
        for m in args.methods:
            cmd = [sys.executable, __file__, "--worker", m, str(n), "--model", args.model, "--dtype", args.dtype,
                   "--episodes", str(args.episodes), "--repeats", str(args.repeats), "--threads", str(args.threads)]
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false",
                   "PYTHONWARNINGS": "ignore"}
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode or not line:
                sys.exit(f"{m} n={n} failed:\n{p.stderr[-3000:]}")
            r = json.loads(line[0][7:])
            results.append(r)
            print(f"n={n:2d} {m:13s} {r['seconds']:7.2f} s/update  peak +{r['peak_mb']:7.0f} MB  "
                  f"(RSS {r['rss_mb']:.0f} MB, {r['tokens']} tokens)", flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    by = {(r["method"], r["turns"]): r for r in results}
    print("\n| turns | " + " | ".join(f"{m} s (MB)" for m in args.methods) + " | per_turn ÷ self_ac | "
          "ppo_separate ÷ self_ac | self_ac ÷ grpo |")
    print("|---" * (len(args.methods) + 4) + "|")
    summary = []
    for n in args.turns:
        cells = [f"{by[m, n]['seconds']:.2f} ({by[m, n]['peak_mb']:.0f})" for m in args.methods]
        ratio = lambda m: by[m, n]["seconds"] / by["self_ac", n]["seconds"] if (m, n) in by and ("self_ac", n) in by else float("nan")
        over_grpo = 1 / ratio("grpo") if ratio("grpo") == ratio("grpo") else float("nan")
        print(f"| {n} | " + " | ".join(cells) + f" | {ratio('per_turn'):.2f}x | {ratio('ppo_separate'):.2f}x | "
              f"{over_grpo:.2f}x |")
        summary.append(f"n={n}: per_turn/self_ac {ratio('per_turn'):.2f}x, ppo_separate/self_ac {ratio('ppo_separate'):.2f}x")
    print("SUMMARY " + "; ".join(summary))


if __name__ == "__main__":
    main()
