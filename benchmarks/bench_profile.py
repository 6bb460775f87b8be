"""Where the default run's time goes: a whole `selfevolve train` run, every second charged to a stage.

    python benchmarks/bench_profile.py                          # the default run (about 25 min on a quiet CPU)
    python benchmarks/bench_profile.py train.steps=2 eval.episodes=16 train.warm_start_steps=2   # a quick look
    python benchmarks/bench_profile.py --limit-gflops=500 ...   # another machine's compute limit

Arguments are config overrides, as for `selfevolve train` (the run folder defaults to runs/bench_profile and
is replaced). The run is the trainer's own loop, unchanged; the profile wraps its functions for the duration
(nothing in the package knows about it), so a stage is exactly what its function does:

- phases (the innermost one a second falls in): evaluation (`Trainer.evaluate`), warm start (behaviour cloning,
  its evaluation excluded), rollout (`Trainer.collect`), credit, update, checkpoint (`Trainer.save`), logs
  (trajectory records, metrics), and the rest of the loop;
- kinds, across phases: the model's forward in generation split into prefill (more than one new position) and
  decode (one), generation's own work besides the forward (sampling, token statistics), detokenising, the
  environment step with action parsing, prompt building (`EpisodeContext`), the rest of the rollout loop,
  expert episodes, the update's forward (`Policy.forward_rows`), backward, optimizer step, collation, and the
  update's own work (loss, statistics).

It also counts the tokens each kind of forward processes (real tokens; in the update the shared prefix and every
distinct turn of a micro-batch's tree once, as they are encoded), and turns them into GFLOP/s as
`bench_rollout.py` does (2 · N_body per token fed, 2 · N_head per token whose logits are computed; attention
and LoRA left out). The backward is counted as the same 2 · N_body per token: the base weights are frozen, so
it computes activation gradients only (plus LoRA's, left out). The fraction is of the machine's compute limit
as issue 19 states it: what a large `linear` (256×576 by 576×1536) reaches with the run's threads and dtype,
timed after the run (`bench_rollout.measured_limit`: the CPU under this project has changed between sessions);
`--limit-gflops` sets it instead (on a GPU, a large bf16 matrix product's rate: that small shape underfills one).
On a GPU every region edge waits for the queued kernels (`torch.cuda.synchronize`), so a kernel's time is charged
to the region that launched it.

Prints both tables, the phase × kind matrix and the throughputs, writes them to OUT/profile.json, and ends with a
SUMMARY line.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from contextlib import contextmanager, ExitStack
from pathlib import Path

import torch
import transformers

import selfevolve.agent.context as context_mod
import selfevolve.models.policy as policy_mod
import selfevolve.objectives.update as update_mod
import selfevolve.rollout.runner as runner_mod
import selfevolve.train.trainer as trainer_mod
from bench_rollout import measured_limit, param_counts
from selfevolve.config import load_config
from selfevolve.models.prefix_sharing import segment_tree
from selfevolve.train.metrics import MetricsLogger

# region -> the phase it opens (a second is charged to the innermost phase it falls in)
PHASES = {"evaluation": "evaluation", "warm start": "warm start", "rollout": "rollout", "credit": "credit",
          "update": "update", "checkpoint": "checkpoint", "trajectory log": "logs", "metrics log": "logs"}


ON_GPU = torch.cuda.is_available()


def _sync() -> None:
    """On a GPU, wait for the queued kernels at every region edge, so their time lands in the region that launched
    them, not in whichever later call happens to wait (a .item() or a copy to the CPU). A no-op on the CPU."""
    if ON_GPU:
        torch.cuda.synchronize()


class Regions:
    """Nested wall-clock regions. Each region's exclusive time (its own minus its children's) is charged to the
    pair (innermost phase on the stack, the region's kind)."""

    def __init__(self):
        self.stack: list[list] = []  # [name, start, children's seconds]
        self.charged: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.tokens: dict[str, int] = defaultdict(int)  # kind -> tokens fed through the body
        self.head_tokens: dict[str, int] = defaultdict(int)  # kind -> tokens whose logits were computed

    def enter(self, name: str) -> None:
        _sync()
        self.stack.append([name, time.perf_counter(), 0.0])

    def leave(self) -> None:
        _sync()
        name, start, children = self.stack.pop()
        took = time.perf_counter() - start
        if self.stack:
            self.stack[-1][2] += took
        phase = next((PHASES[n] for n, _, _ in reversed(self.stack + [[name, 0, 0]]) if n in PHASES), "loop")
        # a phase's own time is what its function does besides the regions inside it
        kind = f"{name} (own work)" if name in ("evaluation", "warm start", "rollout", "update") else name
        self.charged[(phase, kind)] += took - children
        self.calls[name] += 1

    @contextmanager
    def region(self, name: str):
        self.enter(name)
        try:
            yield
        finally:
            self.leave()

    def wrap(self, fn, name: str):
        def timed(*args, **kwargs):
            with self.region(name):
                return fn(*args, **kwargs)
        return timed

    @property
    def innermost(self) -> str | None:
        return self.stack[-1][0] if self.stack else None


@contextmanager
def patched(obj, attr: str, value):
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


def instrument(trainer, regions: Regions) -> ExitStack:
    """Wrap the run's functions; closing the returned stack puts every one back."""
    stack = ExitStack()
    r = regions
    for method, name in (("evaluate", "evaluation"), ("warm_start", "warm start"), ("collect", "rollout"),
                         ("update", "update"), ("save", "checkpoint")):
        stack.enter_context(patched(trainer, method, r.wrap(getattr(trainer, method), name)))
    # the credit is the algorithm's (selfevolve/objectives/): the trainer calls its objective's
    stack.enter_context(patched(trainer.objective, "credit", r.wrap(trainer.objective.credit, "credit")))
    for mod, fn, name in ((trainer_mod, "trajectory_records", "trajectory log"),
                          (trainer_mod, "expert_episodes", "expert episodes"),
                          (policy_mod, "generate", "generate (sampling, statistics)"),
                          (runner_mod, "play", "env step + parse"),
                          (update_mod, "collate", "collate")):
        stack.enter_context(patched(mod, fn, r.wrap(getattr(mod, fn), name)))
    # evaluate.py and collect.py import runner.rollout by name: wrap their bindings
    import selfevolve.rollout.collect as collect_mod
    import selfevolve.train.evaluate as evaluate_mod
    for mod in (collect_mod, evaluate_mod):
        stack.enter_context(patched(mod, "rollout", r.wrap(getattr(mod, "rollout"), "rollout loop")))
    for cls, fn in ((MetricsLogger, "log"), (MetricsLogger, "scalar")):
        stack.enter_context(patched(cls, fn, r.wrap(getattr(cls, fn), "metrics log")))
    for fn in ("__init__", "advance", "render"):
        stack.enter_context(patched(context_mod.EpisodeContext, fn,
                                    r.wrap(getattr(context_mod.EpisodeContext, fn), "prompt building")))
    policy = trainer.policy
    stack.enter_context(patched(policy, "decode", r.wrap(policy.decode, "detokenise")))
    forward_rows = r.wrap(policy.forward_rows, "update forward")

    def counted_forward_rows(input_ids, attention_mask, loss_mask, **kw):
        # the shared prefix is encoded once for all rows, and with turn cuts every distinct segment of the rows'
        # tree once (Policy.forward_rows, models/prefix_sharing.py); real tokens, padding not counted
        P = kw.get("prefix_len", 0) if input_ids.shape[0] > 1 else 0
        fed = int(attention_mask.sum()) - (input_ids.shape[0] - 1) * P
        if P and kw.get("cuts") is not None:
            levels, _ = segment_tree(input_ids.tolist(), attention_mask.sum(1).tolist(), P, kw["cuts"])
            fed = P + sum(n.end - n.start for nodes in levels for n in nodes)
        heads = int(loss_mask[:, 1:].sum()) if loss_mask is not None else 0
        for kind in ("update forward", "backward") if torch.is_grad_enabled() else ("update forward",):
            r.tokens[kind] += fed
            r.head_tokens[kind] += heads
        return forward_rows(input_ids, attention_mask, loss_mask, **kw)

    stack.enter_context(patched(policy, "forward_rows", counted_forward_rows))
    stack.enter_context(patched(trainer.optimizer, "step", r.wrap(trainer.optimizer.step, "optimizer step")))
    stack.enter_context(patched(torch.Tensor, "backward", r.wrap(torch.Tensor.backward, "backward")))

    def before(module, args, kwargs):
        if r.innermost == "generate (sampling, statistics)":
            ids = kwargs.get("input_ids", args[0] if args else None)
            kind = "prefill" if ids.shape[1] > 1 else "decode"
            mask = kwargs.get("attention_mask")
            r.tokens[kind] += int(mask[:, -ids.shape[1]:].sum()) if mask is not None else ids.numel()
            # logits_to_keep=1: one position's logits per row (the prefix's own forward computes none needed,
            # but is counted alike: one row)
            r.head_tokens[kind] += ids.shape[0]
            r.enter(kind)
        else:
            r.enter("model forward (other)")

    def after(module, args, kwargs, output):
        r.leave()

    hooks = [policy.model.register_forward_pre_hook(before, with_kwargs=True),
             policy.model.register_forward_hook(after, with_kwargs=True)]
    stack.callback(lambda: [h.remove() for h in hooks])
    return stack


def table(title: str, totals: dict[str, float], wall: float) -> list[str]:
    lines = [f"\n{title}", f"{'':34s} {'seconds':>9s} {'share':>7s}"]
    for name, s in sorted(totals.items(), key=lambda kv: -kv[1]):
        lines.append(f"{name:34s} {s:9.1f} {s / wall:7.1%}")
    return lines


def main() -> None:
    overrides = sys.argv[1:]
    limit = None
    for o in list(overrides):
        if o.startswith("--limit-gflops="):
            limit = float(o.split("=", 1)[1])
            overrides.remove(o)
    if not any(o.startswith("train.out_dir=") for o in overrides):
        overrides += ["train.out_dir=runs/bench_profile"]
    if not any(o.startswith("train.overwrite=") for o in overrides):
        overrides += ["train.overwrite=true"]
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    cfg = load_config(overrides=overrides)
    regions = Regions()
    t0 = time.perf_counter()
    trainer = trainer_mod.Trainer(cfg)
    setup = time.perf_counter() - t0
    with instrument(trainer, regions):
        t1 = time.perf_counter()
        result = trainer.train()
        wall = time.perf_counter() - t1
    accounted = sum(regions.charged.values())
    regions.charged[("loop", "rest of the loop")] += wall - accounted
    by_phase: dict[str, float] = defaultdict(float)
    by_kind: dict[str, float] = defaultdict(float)
    for (phase, kind), s in regions.charged.items():
        by_phase[phase] += s
        by_kind[kind] += s
    lines = [f"profile of `selfevolve train {' '.join(sys.argv[1:])}`: {wall:.1f} s in train(), "
             f"{setup:.1f} s building the trainer; torch threads {torch.get_num_threads()}; "
             f"device {torch.cuda.get_device_name() if ON_GPU else 'cpu'}"]
    lines += table("by phase", by_phase, wall)
    lines += table("by kind", by_kind, wall)
    lines.append("\nphase x kind (seconds)")
    for phase in sorted(by_phase, key=lambda p: -by_phase[p]):
        parts = sorted(((k, s) for (p, k), s in regions.charged.items() if p == phase), key=lambda kv: -kv[1])
        lines.append(f"  {phase}: " + ", ".join(f"{k} {s:.1f}" for k, s in parts if s >= 0.05))
    n_body, n_head = param_counts(trainer.policy.model)
    # the limit of the machine and threads the run had, measured after it (a GPU's: --limit-gflops, a large bf16
    # product's rate; the small CPU shape would not fill it)
    params = next(trainer.policy.model.parameters())
    peak = limit or measured_limit(params.dtype, str(params.device))
    rates = {}
    lines.append(f"\nthroughput (N_body {n_body / 1e6:.1f} M, N_head {n_head / 1e6:.1f} M; limit {peak:.0f} GFLOP/s)")
    for kind in ("prefill", "decode", "update forward", "backward"):
        sec, tok = by_kind.get(kind, 0.0), regions.tokens.get(kind, 0)
        if sec <= 0 or not tok:
            continue
        gf = (2.0 * n_body * tok + 2.0 * n_head * regions.head_tokens[kind]) / sec / 1e9
        rates[kind] = {"seconds": sec, "tokens": tok, "tokens_per_s": tok / sec, "gflops": gf, "of_peak": gf / peak}
        lines.append(f"{kind:34s} {tok:>10d} tokens {tok / sec:9.1f} tok/s {gf:7.1f} GFLOP/s {gf / peak:7.1%}")
    print("\n".join(lines))
    out = Path(cfg.train.out_dir)
    (out / "profile.json").write_text(json.dumps({
        "overrides": sys.argv[1:], "wall_s": wall, "setup_s": setup, "threads": torch.get_num_threads(),
        "by_phase": by_phase, "by_kind": by_kind, "calls": regions.calls,
        "charged": [{"phase": p, "kind": k, "s": s} for (p, k), s in regions.charged.items()],
        "eval_success": result.get("eval/success"), "rates": rates, "peak_gflops": peak,
    }, indent=1))
    gen = by_kind["prefill"] + by_kind["decode"] + by_kind["generate (sampling, statistics)"]
    upd = by_kind["update forward"] + by_kind["backward"] + by_kind["optimizer step"]
    print(f"SUMMARY wall {wall:.0f} s: evaluation {by_phase['evaluation'] / wall:.0%}, "
          f"warm start {by_phase['warm start'] / wall:.0%}, rollout {by_phase['rollout'] / wall:.0%}, "
          f"update {by_phase['update'] / wall:.0%}; generation {gen / wall:.0%} (prefill {by_kind['prefill'] / wall:.0%}, "
          f"decode {by_kind['decode'] / wall:.0%}), update forward+backward+step {upd / wall:.0%}, "
          f"env {by_kind['env step + parse'] / wall:.0%}; "
          + ", ".join(f"{k} {v['of_peak']:.0%} of peak" for k, v in rates.items())
          + f"; eval/success {result.get('eval/success')}")


if __name__ == "__main__":
    main()
