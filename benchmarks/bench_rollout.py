"""Rollout throughput: the batched rollout engine against a naive loop, on the same episodes.

Engine: ``selfevolve.rollout.runner.rollout`` over all episodes at once (one batched ``Policy.generate`` call per
turn, the common prompt prefix encoded once and its KV cache shared by the batch).

Naive: the same tasks one episode at a time; every turn builds the full prompt ids with the same
``PromptBuilder`` and calls Hugging Face ``model.generate`` with batch 1 (no cache reuse between turns or
episodes), then steps the environment with ``parse_action`` of the decoded reply.

Both run greedy, so they should play the same moves; the fraction of identical episodes is reported (bf16
batching can flip rare near-ties, so it is not asserted).

FLOPs (forward only, stated in the output):
    FLOPs = 2 * N_body * (prompt tokens encoded + generated tokens)
          + 2 * N_head * (generated tokens)
(the generated tokens stand for the tokens fed back while decoding: one more per reply than were actually
fed, ~1.5% of the total here)
with N_body the non-embedding parameters (decoder layers + final norm, LoRA adapters excluded) and
N_head = vocab * hidden (the tied lm_head; only the logits that pick a token are needed). Attention-score
FLOPs (4 * layers * hidden * context per token, ~10% at these ~200-token contexts) and LoRA FLOPs are left
out, so the utilisation figures are slight underestimates of the work actually done.

Usage::

    python benchmarks/bench_rollout.py --episodes 32
    python benchmarks/bench_rollout.py --episodes 4 --max-turns 3          # quick check
    python benchmarks/bench_rollout.py --episodes 32 --profile             # + where the engine's time goes
    python benchmarks/bench_rollout.py --episodes 32 --threads 1           # on a machine shared with other jobs
    python benchmarks/bench_rollout.py --env-opt size=6 --env-opt slippery=true
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import resource
import time

import torch

from selfevolve.agent.parsing import parse_action
from selfevolve.config import load_config
from selfevolve.envs import ENVS, make_env
from selfevolve.rollout.runner import RolloutStats, rollout
from selfevolve.tasks.source import seed_tasks
from selfevolve.train.trainer import build_policy, build_prompt

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def measured_limit(dtype: torch.dtype = torch.float32, device: str = "cpu", seconds: float = 3.0) -> float:
    """The compute limit issue 19 measures against, in GFLOP/s: a large `linear` (256x576 by 576x1536, the
    shape of the model's MLP input over a batch of prompt tokens), timed now with this process's threads.

    Timed in the run rather than written down, because the machine under this project is not always the same:
    the CPU of 2026-11-21..24 reached 257 GFLOP/s fp32 on 2 threads, the one of 2026-11-25 (AVX2, 2.0 GHz)
    47-58. The best of three rounds, so a moment of contention lowers it less than it lowers the run.
    """
    x = torch.randn(256, 576, dtype=dtype, device=device)
    w = torch.randn(1536, 576, dtype=dtype, device=device)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    for _ in range(3):
        torch.nn.functional.linear(x, w)
    sync()
    best, flop = 0.0, 2.0 * 256 * 576 * 1536
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 3:
            torch.nn.functional.linear(x, w)
            n += 1
        sync()
        best = max(best, n * flop / (time.perf_counter() - t0) / 1e9)
    return best


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dtype", default="fp32", choices=["bf16", "fp32", "fp16"], help="fp32: what model.dtype=auto picks on a CPU")
    p.add_argument("--env", default="frozenlake", choices=sorted(ENVS))
    p.add_argument("--env-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="environment option (repeatable), e.g. size=6")
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--max-turns", type=int, default=None, help="default: the environment's max_turns")
    p.add_argument("--greedy", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--seed-offset", type=int, default=1_000_000, help="first evaluation seed (eval_tasks)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--peak-gflops", type=float, default=None,
                   help="the compute limit in GFLOP/s (default: measured at the start, measured_limit)")
    p.add_argument("--skip-naive", action="store_true")
    p.add_argument("--profile", action="store_true",
                   help="time breakdown of the engine run: prefill / decode / lm_head / token stats / prompt / Python")
    p.add_argument("override", nargs="*", help="extra config overrides (dotted.key=value)")
    return p.parse_args(argv)


def param_counts(model) -> tuple[int, int]:
    """(N_body, N_head): non-embedding parameters without LoRA, and the lm_head's vocab * hidden."""
    body = 0
    for name, prm in model.named_parameters():
        if "lora_" in name or "embed_tokens" in name or "lm_head" in name:
            continue
        body += prm.numel()
    cfg = model.config
    return body, cfg.vocab_size * cfg.hidden_size


def flops(n_body: int, n_head: int, fed_tokens: int, new_tokens: int) -> float:
    return 2.0 * n_body * fed_tokens + 2.0 * n_head * new_tokens


# ---------------------------------------------------------------------------------------------------- the paths
def run_engine(policy, builder, tasks, env_cls, env_opts, max_turns, greedy):
    envs = [make_env(env_cls, **env_opts) for _ in tasks]
    stats = RolloutStats()
    gen = torch.Generator().manual_seed(0)
    c0, r0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    trajs = rollout(policy, envs, tasks, builder, max_turns=max_turns, greedy=greedy, generator=gen, stats=stats)
    stats.cpu_seconds = time.process_time() - c0
    _memory_traffic(stats, r0)
    replies = [[s.action_text for s in t.steps] for t in trajs]
    return replies, trajs, stats


def run_naive(policy, builder, tasks, env_cls, env_opts, max_turns, greedy):
    model = policy.model
    model.eval()
    stop = sorted(policy.stop_ids)
    stats = RolloutStats()
    replies_all, successes = [], []
    t0, c0, r0 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    with torch.no_grad(), policy.sampling():  # model.sampler_dtype: the naive loop generates in it too
        for task in tasks:
            env = make_env(env_cls, **env_opts)
            obs, replies, success = [env.reset(task.seed)], [], False
            for _ in range(max_turns):
                ids = builder.prompt_ids(obs, replies, task.instruction)
                x = torch.tensor([ids], device=policy.device)
                out = model.generate(
                    input_ids=x,
                    attention_mask=torch.ones_like(x),
                    max_new_tokens=policy.max_new_tokens,
                    do_sample=not greedy,
                    eos_token_id=stop,
                    pad_token_id=policy.pad_id,
                )
                new = out[0, len(ids):].tolist()
                stats.prompt_tokens += len(ids)
                stats.new_tokens += len(new)
                stats.generate_calls += 1
                text = policy.decode(new)
                o, _reward, done, info = env.step(parse_action(text))
                success = bool(info.get("success", False))
                obs.append(o)
                replies.append(text)
                if done:
                    break
            replies_all.append(replies)
            successes.append(success)
    stats.seconds = time.perf_counter() - t0
    stats.cpu_seconds = time.process_time() - c0
    _memory_traffic(stats, r0)
    return replies_all, successes, stats


def _memory_traffic(stats, r0) -> None:
    """Page faults and system CPU seconds since ``r0``: memory handed back to the system and faulted in again
    shows here (selfevolve/models/allocator.py)."""
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    stats.page_faults = r1.ru_minflt - r0.ru_minflt
    stats.system_seconds = r1.ru_stime - r0.ru_stime


def warm_up(policy, builder, env_cls, env_opts):
    """One tiny call of each path so that first-call costs (thread pools, kernel selection) are not timed."""
    tasks = seed_tasks(getattr(env_cls, "name", env_cls.__name__), 2, seed_offset=5_000_000)
    run_engine(policy, builder, tasks, env_cls, env_opts, 1, True)
    run_naive(policy, builder, tasks[:1], env_cls, env_opts, 1, True)


# ---------------------------------------------------------------------------------------------------- profile
@contextlib.contextmanager
def _timed_forward(policy, buckets: dict[str, float], counts: dict[str, int]):
    """Time every model forward (prefill: more than one new position; decode: one), the lm_head inside it, and
    the per-token statistics of generation; the rest of a rollout is Python/glue."""
    from selfevolve.models import generation as G

    base = policy.model.get_base_model() if hasattr(policy.model, "get_base_model") else policy.model
    orig_fwd, orig_head, orig_stats = base.forward, base.lm_head.forward, G._token_stats

    def fwd(*a, **kw):
        ids = kw.get("input_ids")
        kind = "decode" if ids is not None and ids.shape[1] == 1 else "prefill"
        t = time.perf_counter()
        r = orig_fwd(*a, **kw)
        buckets[kind] += time.perf_counter() - t
        counts[kind] += 1
        counts[kind + "_tokens"] += int(ids.numel()) if ids is not None else 0
        return r

    def head(h):
        t = time.perf_counter()
        r = orig_head(h)
        buckets["lm_head"] += time.perf_counter() - t
        counts["lm_head_rows"] += int(h.numel() // h.shape[-1])
        return r

    def stats(*a, **kw):
        t = time.perf_counter()
        r = orig_stats(*a, **kw)
        buckets["token_stats"] += time.perf_counter() - t
        return r

    base.forward, base.lm_head.forward, G._token_stats = fwd, head, stats
    try:
        yield
    finally:
        del base.forward, base.lm_head.forward
        G._token_stats = orig_stats


@contextlib.contextmanager
def instrumented(policy, builder, enabled: bool):
    """Time buckets of the rollout run inside (a few perf_counter calls per forward: negligible overhead)."""
    prof = {"buckets": {"prefill": 0.0, "decode": 0.0, "lm_head": 0.0, "token_stats": 0.0, "prompt": 0.0},
            "counts": {"prefill": 0, "decode": 0, "prefill_tokens": 0, "decode_tokens": 0, "lm_head_rows": 0}}
    if not enabled:
        yield None
        return
    orig_prompt_ids = builder.prompt_ids

    def prompt_ids(*a, **kw):
        t = time.perf_counter()
        r = orig_prompt_ids(*a, **kw)
        prof["buckets"]["prompt"] += time.perf_counter() - t
        return r

    builder.prompt_ids = prompt_ids
    try:
        with _timed_forward(policy, prof["buckets"], prof["counts"]):
            yield prof
    finally:
        del builder.prompt_ids


def print_breakdown(prof, st):
    b, c, total = prof["buckets"], prof["counts"], st.seconds
    rest = total - b["prefill"] - b["decode"] - b["token_stats"] - b["prompt"]
    print("\nEngine time breakdown (the timed engine run; lm_head time is part of the forwards):")
    rows = [
        ("prefill forwards", b["prefill"], f"{c['prefill']} calls, {c['prefill_tokens']} input ids (incl. padding)"),
        ("decode forwards", b["decode"], f"{c['decode']} calls, {c['decode_tokens']} input ids (incl. finished rows)"),
        ("  of which lm_head", b["lm_head"],
         f"{c['lm_head_rows']} rows x vocab logits computed, {st.new_tokens} needed"),
        ("token statistics", b["token_stats"], "log_softmax/entropy/top-2 over the vocabulary"),
        ("prompt rendering", b["prompt"], "chat template + tokenisation"),
        ("other Python", rest, "env steps, decode, bookkeeping, padding/masks"),
    ]
    for name, sec, note in rows:
        print(f"  {name:<20} {sec:7.2f} s  {100 * sec / total:5.1f}%   {note}")
    print(f"  {'total':<20} {total:7.2f} s")


# ---------------------------------------------------------------------------------------------------- main
def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = [f"model.name={args.model}", f"model.dtype={args.dtype}", f"env.name={args.env}"]
    overrides += [f"env.{o}" for o in args.env_opt] + list(args.override)
    cfg = load_config(overrides=overrides)
    torch.manual_seed(cfg.seed)
    env_cls = ENVS[cfg.env.name]
    env_opts = cfg.env.options()
    probe = make_env(env_cls, **env_opts)
    t = time.perf_counter()
    policy = build_policy(cfg)
    builder = build_prompt(cfg, policy, probe)
    load_s = time.perf_counter() - t
    max_turns = args.max_turns or probe.max_turns
    tasks = seed_tasks(getattr(env_cls, "name", env_cls.__name__), args.episodes, args.seed_offset)
    n_body, n_head = param_counts(policy.model)
    # measured with the run's threads and dtype, on whatever machine this is
    compute = policy.sampler_weights.dtype if policy.sampler_weights is not None else DTYPES[args.dtype]
    compute_name = str(compute).removeprefix("torch.")
    peak = args.peak_gflops or measured_limit(compute, str(policy.device))  # generation's dtype (model.sampler_dtype)

    print(f"model {args.model} ({args.dtype}), policy loaded in {load_s:.1f}s; env {cfg.env.name} {env_opts or '(defaults)'}, "
          f"{args.episodes} episodes, max_turns {max_turns}, max_new_tokens {policy.max_new_tokens}, "
          f"greedy {args.greedy}, torch threads {torch.get_num_threads()}, {platform.processor() or platform.machine()}")
    print(f"N_body (non-embedding, no LoRA) = {n_body / 1e6:.1f} M, N_head (vocab x hidden) = {n_head / 1e6:.1f} M; "
          f"FLOPs = 2*N_body*(prompt+new tokens fed) + 2*N_head*new tokens; peak {peak:.0f} GFLOP/s")

    warm_up(policy, builder, env_cls, env_opts)
    load0 = os.getloadavg()[0]

    with instrumented(policy, builder, args.profile) as prof:
        e_replies, e_trajs, es = run_engine(policy, builder, tasks, env_cls, env_opts, max_turns, args.greedy)
    results = [("engine (batched rollout)", es)]
    n_replies = None
    if not args.skip_naive:
        n_replies, n_success, ns = run_naive(policy, builder, tasks, env_cls, env_opts, max_turns, args.greedy)
        results.append(("naive (HF generate, batch 1)", ns))

    load1 = os.getloadavg()[0]
    print(f"\n1-min load average {load0:.2f} before / {load1:.2f} after the timed runs "
          f"({os.cpu_count()} CPUs; above ~{torch.get_num_threads()} means other jobs shared the cores: "
          f"'cpu s' below is this process's CPU time)")
    hdr = f"{'path':<30} {'episodes':>8} {'turns':>6} {'calls':>6} {'new tok':>8} {'prompt tok':>10} {'seconds':>8} " \
          f"{'cpu s':>7} {'new tok/s':>10} {'prompt tok/s':>12} {'GFLOP/s':>8} {'% peak':>7}"
    print(hdr)
    print("-" * len(hdr))
    util = {}
    for name, st in results:
        turns = sum(len(r) for r in (e_replies if st is es else n_replies))
        gf = flops(n_body, n_head, st.prompt_tokens + st.new_tokens, st.new_tokens) / st.seconds / 1e9
        util[name] = (gf, 100 * gf / peak)
        print(f"{name:<30} {len(tasks):>8} {turns:>6} {st.generate_calls:>6} {st.new_tokens:>8} {st.prompt_tokens:>10} "
              f"{st.seconds:>8.2f} {st.cpu_seconds:>7.1f} {st.new_tokens / st.seconds:>10.1f} {st.prompt_tokens / st.seconds:>12.1f} "
              f"{gf:>8.1f} {100 * gf / peak:>6.1f}%")
    print("  " + "; ".join(f"{name.split(' (')[0]}: {st.page_faults:,} page faults, {st.system_seconds:.1f} s system CPU"
                           for name, st in results))

    success = sum(t.success for t in e_trajs) / len(e_trajs)
    print(f"\nengine greedy success {success:.2f}, mean turns {sum(len(r) for r in e_replies) / len(e_replies):.2f}")
    gf_e, pct_e = util[results[0][0]]
    if n_replies is not None:
        same_ep = sum(a == b for a, b in zip(e_replies, n_replies)) / len(tasks)
        pairs = [(a, b) for ea, na in zip(e_replies, n_replies) for a, b in zip(ea, na)]
        first_div = [next((k for k, (a, b) in enumerate(zip(ea, na)) if a != b), None) for ea, na in zip(e_replies, n_replies)]
        print(f"identical episodes (same reply sequence): {same_ep:.2%}; identical replies over aligned turns: "
              f"{sum(a == b for a, b in pairs) / max(1, len(pairs)):.2%}; naive success {sum(n_success) / len(tasks):.2f}")
        diverged = [(tasks[i].seed, k) for i, k in enumerate(first_div) if k is not None]
        if diverged:
            print(f"  diverging episodes (seed, first differing turn): {diverged}")
        # Same episodes, so the ratio of generated tokens/s is the ratio of wall times when replies agree.
        speedup = (es.new_tokens / es.seconds) / (ns.new_tokens / ns.seconds)
        met = speedup >= 8 and pct_e >= 50  # issue 19: >= 8x the naive loop, >= 50 % of the measured limit
        print(f"\nSUMMARY rollout engine {es.new_tokens / es.seconds:.1f} tok/s vs naive {ns.new_tokens / ns.seconds:.1f} "
              f"tok/s = {speedup:.2f}x ; engine uses {pct_e:.1f}% of {compute_name} peak ({gf_e:.1f} of {peak:.0f} "
              f"GFLOP/s, prefill+decode FLOPs / s) ; targets >= 8x and >= 50%: {'met' if met else 'NOT met'}")
    else:
        print(f"\nSUMMARY rollout engine {es.new_tokens / es.seconds:.1f} tok/s ; engine uses {pct_e:.1f}% of "
              f"{args.dtype} peak ({gf_e:.1f} of {peak:.0f} GFLOP/s)")

    if prof is not None:
        print_breakdown(prof, es)


if __name__ == "__main__":
    main()
