"""How far is a bf16 update's gradient from fp32's, on the same weights and the same batch?

The default run learned less in bf16 than in fp32 (docs/benchmarks.md, "bf16 on a CPU that has it"), and neither
the PPO ratio's rounding nor the evaluation was the cause. This measures the next candidate: the LoRA gradient
itself. One batch of the default warm start (``--tasks`` expert FrozenLake episodes from the training seeds,
``bench_memory.warm_start_batch``) goes through ``ppo_update`` with one minibatch, as the behaviour cloning
(``nll``) and as PPO with advantages drawn from N(0, 1) (``ppo``; π_old recomputed, so the ratio is 1), once with
the model in fp32 and once in bf16 (the adapter fp32 in both, as peft keeps it), with the same adapter weights:
those of ``--adapter`` (a run's ``adapter.safetensors``) or, without it, lora_B drawn from N(0, 0.02²) so that the
adapter changes the output (a fresh adapter's B is zero and its gradient reaches B only). The arm ``bf16, fp32
head`` computes the log-probs' logits in fp32 from the bf16 hidden state. Prints the cosine of each bf16 gradient
with fp32's, its relative error ``|g16 − g32| / |g32|`` and the norm ratio; and, for scale, the same for fp32's
gradient on the next ``--tasks`` episodes (another batch of the same distribution; ``nll`` only). The norm ratio
is 1 wherever the update clipped both gradients to ``algo.max_grad_norm``; the cosine is that of the directions.

    python benchmarks/bench_bf16_gradients.py [--tasks 8] [--adapter runs/default/checkpoints/step-20/adapter.safetensors]
"""

from __future__ import annotations

import argparse
import random

import torch
import transformers
from safetensors.torch import load_file

from bench_memory import warm_start_batch  # this folder is on the path: the script's own
from selfevolve.build import build_policy
from selfevolve.config import load_config
from selfevolve.models import policy as policy_module
from selfevolve.objectives import update

PLAIN = policy_module.Policy.token_logprobs


class GradientGrab:
    """An optimizer that only keeps the gradient of its one step, flattened in fp32."""

    def __init__(self, params):
        self.params, self.grad = params, None

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        self.grad = torch.cat([p.grad.detach().float().flatten() for p in self.params])


def fp32_head(self, head, h, targets, with_entropy=False):
    """``Policy.token_logprobs`` with the logits computed in fp32."""
    logits = torch.nn.functional.linear(h.float(), head.weight.float()) / self.temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1).detach() if with_entropy else None
    return logp_all.gather(-1, targets[:, None]).squeeze(-1), entropy


def gradient(dtype: str, adapter: dict, objective: str, tasks: int, head32: bool = False,
             other_batch: bool = False) -> torch.Tensor:
    """The gradient of one update on the first ``tasks`` episodes (``other_batch``: on the next ``tasks``)."""
    cfg = load_config(overrides=[f"model.dtype={dtype}", "algo.minibatches=1", "algo.old_logprobs=recompute"])
    torch.manual_seed(cfg.seed)
    policy = build_policy(cfg)
    policy.load_adapter_state(adapter, value_head="ignore")
    nll, ppo = warm_start_batch(cfg, policy, 2 * tasks)
    part = slice(tasks, 2 * tasks) if other_batch else slice(0, tasks)
    nll, ppo = nll[part], ppo[part]
    grab = GradientGrab(policy.trainable_parameters())
    policy_module.Policy.token_logprobs = fp32_head if head32 else PLAIN
    try:
        update.ppo_update(policy, grab, nll if objective == "nll" else ppo, cfg.algo, random.Random(0),
                          objective=objective)
    finally:
        policy_module.Policy.token_logprobs = PLAIN
    return grab.grad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--adapter", default=None, help="a run's adapter.safetensors (default: lora_B ~ N(0, 0.02²))")
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    cfg = load_config()
    torch.manual_seed(cfg.seed)
    if args.adapter:
        adapter = load_file(args.adapter)
    else:
        adapter = build_policy(cfg).adapter_state()
        draw = torch.Generator().manual_seed(1)
        adapter = {k: torch.randn(v.shape, generator=draw) * 0.02 if "lora_B" in k else v for k, v in adapter.items()}
    lines = []
    for objective in ("nll", "ppo"):
        g32 = gradient("fp32", adapter, objective, args.tasks)
        if objective == "nll":  # ppo's advantages are random draws: another batch's gradient is no scale there
            other = gradient("fp32", adapter, objective, args.tasks, other_batch=True)
            cos = torch.nn.functional.cosine_similarity(g32, other, 0).item()
            print(f"| {objective} | fp32, the next {args.tasks} episodes (for scale) | {cos:.5f} | "
                  f"{((other - g32).norm() / g32.norm()).item():.4f} | {(other.norm() / g32.norm()).item():.4f} |",
                  flush=True)
            lines.append(f"{objective} fp32 next batch: cosine {cos:.4f}")
        for head32 in (False, True):
            g16 = gradient("bf16", adapter, objective, args.tasks, head32)
            cos = torch.nn.functional.cosine_similarity(g32, g16, 0).item()
            rel = ((g16 - g32).norm() / g32.norm()).item()
            arm = "bf16, fp32 head" if head32 else "bf16"
            print(f"| {objective} | {arm} | {cos:.5f} | {rel:.4f} | {(g16.norm() / g32.norm()).item():.4f} |",
                  flush=True)
            lines.append(f"{objective} {arm}: cosine {cos:.4f}, relative error {rel:.3f}")
    print(f"SUMMARY bf16 LoRA gradients against fp32 ({args.tasks} expert episodes, "
          f"{'adapter ' + args.adapter if args.adapter else 'lora_B ~ N(0, 0.02^2)'}): " + "; ".join(lines))


if __name__ == "__main__":
    main()
