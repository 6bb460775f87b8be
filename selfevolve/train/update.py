"""The update: PPO-clip epochs over minibatches of token rows, with gradient accumulation in micro-batches.

The loss is token-mean over all generated tokens of a minibatch (micro-batches are weighted by their token
count, so accumulation gives exactly the same gradient as one big batch). The optional KL term compares with
the reference policy — the base model with the LoRA adapter disabled.
"""

from __future__ import annotations

import random

import torch

from selfevolve.algos.loss import kl_penalty, ppo_clip_loss
from selfevolve.train.samples import Row, collate, micro_batches, shared_prefix_len


def ppo_update(policy, optimizer, rows: list[Row], algo, rng: random.Random, objective: str = "ppo") -> dict[str, float]:
    """Run ``algo.epochs`` × ``algo.minibatches`` optimizer steps over ``rows``; return averaged metrics.

    ``objective="nll"`` trains the same rows by maximum likelihood instead (the behaviour-cloning warm start).
    """
    sums: dict[str, float] = {}
    count = 0
    params = policy.trainable_parameters()
    # The model stays in eval mode: gradients flow all the same, and no dropout makes the recomputed log-probs
    # differ from the ones that sampled.
    policy.model.eval()
    for _ in range(algo.epochs):
        order = rows[:]
        rng.shuffle(order)
        n_mb = min(algo.minibatches, len(order))
        for m in range(n_mb):
            mb = order[m::n_mb]
            n_tokens = sum(len(r.advantages) for r in mb)
            optimizer.zero_grad(set_to_none=True)
            st_mb: dict[str, float] = {}
            for chunk in micro_batches(mb, algo.micro_batch_tokens):
                b = collate(chunk, policy.pad_id, policy.device)
                P = shared_prefix_len(chunk)
                logp, ent = policy.action_logprobs(
                    b["input_ids"], b["attention_mask"], b["loss_mask"], with_entropy=True, prefix_len=P
                )
                if objective == "nll":
                    loss = -logp.mean()
                    (loss * logp.numel() / n_tokens).backward()
                    for k, v in {"loss/bc": float(loss.detach()), "entropy": float(ent.mean())}.items():
                        st_mb[k] = st_mb.get(k, 0.0) + logp.numel() / n_tokens * v
                    continue
                ones = torch.ones_like(logp)[None]
                loss, st = ppo_clip_loss(
                    logp[None],
                    b["old_logprobs"][None],
                    b["advantages"][None],
                    ones,
                    clip_low=algo.clip_low,
                    clip_high=algo.clip_high,
                    dual_clip=algo.dual_clip,
                )
                st = {k: float(v) for k, v in st.items()}
                st["loss/policy"] = float(loss.detach())
                st["entropy"] = float(ent.mean())
                if algo.kl_coef > 0:
                    with torch.no_grad(), policy.reference():
                        ref, _ = policy.action_logprobs(
                            b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=P
                        )
                    kl = kl_penalty(logp, ref, kind=algo.kl_kind).mean()
                    loss = loss + algo.kl_coef * kl
                    st["kl"] = float(kl.detach())
                w = logp.numel() / n_tokens
                (loss * w).backward()
                for k, v in st.items():
                    st_mb[k] = st_mb.get(k, 0.0) + w * v
            grad_norm = torch.nn.utils.clip_grad_norm_(params, algo.max_grad_norm)
            optimizer.step()
            st_mb["grad_norm"] = float(grad_norm)
            for k, v in st_mb.items():
                sums[k] = sums.get(k, 0.0) + v
            count += 1
    return {k: v / max(count, 1) for k, v in sums.items()}
