"""The update: PPO-clip epochs over minibatches of token rows, with gradient accumulation in micro-batches.

The loss is token-mean over all generated tokens of a minibatch (micro-batches are weighted by their token
count, so accumulation gives exactly the same gradient as one big batch). The optional KL term compares with
the reference policy — the base model with the LoRA adapter disabled.

With a critic (PPO: rows carry ``returns``), the same forward pass also reads the value head at each turn's
value position, and the loss adds ``vf_coef`` × the clipped value loss (turn-mean, weighted across
micro-batches by turn count as the policy loss is by token count).

A row whose every advantage is 0 (a GRPO/RLOO group whose rollouts all scored the same) adds exactly 0 to the
clipped surrogate and to its gradient. Without a KL term or a critic, that is all the loss it carries, so such
rows are not run through the model at all: they still count in the token-mean's denominator, so the loss and
the gradient are those of the whole minibatch (``update/idle_rows`` reports the fraction left out). The
diagnostics (entropy, clip fractions, ratio) are then means over the rows that were run, and absent from a step
whose rows were all idle (its loss is logged: exactly 0).
"""

from __future__ import annotations

import math
import random

import torch

from selfevolve.algos.loss import kl_penalty, ppo_clip_loss, value_loss
from selfevolve.errors import SelfEvolveError
from selfevolve.models.allocator import heap_not_grown_by_large_blocks
from selfevolve.models.prefix_sharing import EncodedPrefix
from selfevolve.models.tree_attention import supports_tree
from selfevolve.objectives import old_logprobs
from selfevolve.objectives.memory import micro_batch_bound
from selfevolve.objectives.samples import (Row, collate, micro_batches, minibatch_schedule, row_logprobs, turn_cuts,
                                           shared_prefix_len)


def ppo_update(policy, optimizer, rows: list[Row], algo, rng: random.Random, objective: str = "ppo",
               vf_coef: float = 0.5, vf_clip: float | None = 0.2, extra=None) -> dict[str, float]:
    """Run :func:`_update` with the heap not grown by the forwards' large blocks (``models/allocator.py``), in the
    update's precision (``model.matmul_dtype=bf16_update``: ``Policy.updating``)."""
    with heap_not_grown_by_large_blocks(), policy.updating():
        return _update(policy, optimizer, rows, algo, rng, objective, vf_coef, vf_clip, extra)


def _update(policy, optimizer, rows: list[Row], algo, rng: random.Random, objective: str = "ppo",
            vf_coef: float = 0.5, vf_clip: float | None = 0.2, extra=None) -> dict[str, float]:
    """Run ``algo.epochs`` × ``algo.minibatches`` optimizer steps over ``rows``; return averaged metrics.

    ``objective="nll"`` trains the same rows by maximum likelihood instead (the behaviour-cloning warm start).
    When the rows carry critic targets (``Row.returns``) and the policy has a value head, the value loss is
    added with weight ``vf_coef``. ``extra(k)``: another term of the objective, run before the ``k``-th optimizer
    step (its own forwards and backward add to the gradients; ``selfevolve evolve``'s imitation term); it
    returns its metrics.
    """
    critic = objective == "ppo" and policy.value_head is not None and any(r.returns for r in rows)
    # the clipped surrogate is the whole loss: rows with all-zero advantages add nothing to it or its gradient
    skip_idle = objective == "ppo" and not critic and algo.kl_coef == 0
    sums: dict[str, float] = {}
    count = 0
    params = policy.trainable_parameters()
    # a micro-batch's tokens: also bounded by the memory their activations take (objectives/memory.py)
    bound = micro_batch_bound(policy.model, algo.micro_batch_tokens, algo.micro_batch_gb)
    # The model stays in eval mode: gradients flow all the same, and no dropout makes the recomputed log-probs
    # differ from the ones that sampled.
    policy.model.eval()
    pi_old = None  # π_old: the sampler's log-probs or the trainer's (objectives/old_logprobs.py)
    if objective == "ppo":
        live = [r for r in rows if any(r.advantages)] if skip_idle else rows  # restated: only the rows run below
        pi_old = old_logprobs.PiOld(policy, algo, live, lambda rs: row_logprobs(policy, rs, algo.micro_batch_tokens))
    for mb in minibatch_schedule(rows, algo, rng):
        n_tokens = sum(len(r.advantages) for r in mb)  # the token-mean's denominator, idle rows included
        n_turns = sum(len(r.returns) for r in mb)
        run = [r for r in mb if any(r.advantages)] if skip_idle else mb
        n_run = sum(len(r.advantages) for r in run)
        optimizer.zero_grad(set_to_none=True)
        st_mb: dict[str, float] = {"update/idle_rows": 1 - len(run) / len(mb)} if skip_idle else {}
        if not run:  # a zero gradient, as the forward would have given: the optimizer still steps (momentum)
            for p in params:
                p.grad = torch.zeros_like(p)
            st_mb["loss/policy"] = 0.0
        shared = shared_prefix_len(run) if run else 0
        chunks = micro_batches(run, bound, shared, grouped=True) if run else []
        # several micro-batches: their shared prefix is encoded once for all of them, not once each
        prefix = encoded_prefix(policy, run[0].ids[:shared]) if len(chunks) > 1 and shared else None
        for chunk in chunks:
            b = collate(chunk, policy.pad_id, policy.device, clip_high=algo.clip_high)
            P, cuts = shared if prefix else shared_prefix_len(chunk), [turn_cuts(r) for r in chunk]
            # a lone row attends to the encoded prefix too, unless a KL term needs it encoded as its reference is
            # (the reference's lone row is encoded plainly, below)
            own = prefix if len(chunk) > 1 or algo.kl_coef == 0 else None
            logp, ent, values = policy.forward_rows(
                b["input_ids"], b["attention_mask"], b["loss_mask"], with_entropy=True, prefix_len=P,
                cuts=cuts, value_mask=b["value_mask"] if critic else None, prefix=own,
            )
            if objective == "nll":
                loss = -logp.mean()
                (loss * logp.numel() / n_tokens).backward()
                for k, v in {"loss/bc": float(loss.detach()), "entropy": float(ent.mean())}.items():
                    st_mb[k] = st_mb.get(k, 0.0) + logp.numel() / n_tokens * v
                continue
            ones = torch.ones_like(logp)[None]
            old = pi_old.of(count, b["old_logprobs"], logp, b["guided"])
            loss, st = ppo_clip_loss(
                logp[None],
                old[None],
                b["advantages"][None],
                ones,
                clip_low=algo.clip_low,
                # per token where rows carry their own (experience-guided rows: selective boosting)
                clip_high=b["clip_high"][None] if "clip_high" in b else algo.clip_high,
                dual_clip=algo.dual_clip,
            )
            st = {k: float(v) for k, v in st.items()}
            policy_loss = float(loss.detach())
            st["entropy"] = float(ent.mean())
            if algo.kl_coef > 0:
                # encoded exactly as the policy's log-probs are: at the reference itself the KL and its gradient
                # are then exactly 0, where float noise between two encodings would be amplified by Adam
                with torch.no_grad(), policy.reference():
                    ref, _ = policy.action_logprobs(
                        b["input_ids"], b["attention_mask"], b["loss_mask"], prefix_len=P, cuts=cuts
                    )
                kl = kl_penalty(logp, ref, kind=algo.kl_kind).mean()
                loss = loss + algo.kl_coef * kl
                st["kl"] = float(kl.detach())
            w = logp.numel() / n_tokens
            weighted = [(w, {"loss/policy": policy_loss}), (logp.numel() / n_run, st)]
            loss = loss * w
            if critic:
                vloss, vst = value_loss(values, b["old_values"], b["returns"], clip=vf_clip)
                wv = values.numel() / max(n_turns, 1)  # turn-mean across micro-batches
                loss = loss + vf_coef * wv * vloss
                weighted.append((wv, {"loss/value": float(vloss.detach()),
                                      "value/mean": float(values.detach().mean()), **vst}))
            loss.backward()
            for weight, stats in weighted:
                for k, v in stats.items():
                    st_mb[k] = st_mb.get(k, 0.0) + weight * v
        if prefix is not None:
            prefix.backward()
        if extra is not None:
            st_mb.update(extra(count))
        st_mb["grad_norm"] = safe_step(optimizer, params, algo.max_grad_norm, st_mb, count)
        for k, v in st_mb.items():
            sums[k] = sums.get(k, 0.0) + v
        count += 1
    return {**{k: v / max(count, 1) for k, v in sums.items()}, **(pi_old.metrics() if pi_old else {})}


def encoded_prefix(policy, ids: list[int]) -> EncodedPrefix | None:
    """The shared prefix ``ids`` encoded once for a minibatch's micro-batches, where they encode it as a tree
    (``prefix_sharing.encode_rows``); else None."""
    body, _ = policy.body_and_head()
    return EncodedPrefix(body, ids) if supports_tree(body.config) else None


class NonFinite(SelfEvolveError):
    """The loss, the gradient or the weights became NaN or infinite: the run stops before a checkpoint keeps
    them (the trainer names the step; the last checkpoint on disk is the last good state)."""


def safe_step(optimizer, params: list, max_grad_norm: float, stats: dict[str, float], index: int) -> float:
    """Clip the gradient, step the optimizer and return the gradient norm, unless something is not finite:
    then raise :class:`NonFinite` naming what, before the step when the loss or the gradient is (the weights
    stay as they were), after it when the step itself overflowed the weights (an enormous learning rate).

    One NaN would otherwise spread to every adapter tensor at the next step and the run would go on, saving
    checkpoints of NaN weights, to report ``done``."""
    where = f"optimizer step {index + 1} of the update"
    bad = {k: v for k, v in stats.items() if k.startswith("loss/") and not math.isfinite(v)}
    if bad:
        raise NonFinite(f"the loss is not finite ({', '.join(f'{k}={v}' for k, v in bad.items())}) at {where}")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    if not math.isfinite(grad_norm):
        raise NonFinite(f"the gradient norm is {grad_norm} at {where}")
    optimizer.step()
    if not all(bool(torch.isfinite(p).all()) for p in params):
        raise NonFinite(f"the weights are not finite after {where} (gradient norm {grad_norm:.3g})")
    return grad_norm


@torch.no_grad()
def compute_values(policy, rows: list[Row], micro_batch_tokens: int) -> list[list[float]]:
    """V at every row's value positions under the current weights (PPO's rollout-time values, before the
    update); one no-grad forward per micro-batch. Returns one list per row, in the rows' order."""
    policy.model.eval()
    out: dict[int, list[float]] = {}
    index = {id(r): k for k, r in enumerate(rows)}
    for chunk in micro_batches(rows, micro_batch_tokens, shared_prefix_len(rows), grouped=True):
        b = collate(chunk, policy.pad_id, policy.device)
        P = shared_prefix_len(chunk)  # stops before the first reply's predictor = the first value position
        _, _, values = policy.forward_rows(b["input_ids"], b["attention_mask"], None, value_mask=b["value_mask"],
                                           prefix_len=P, cuts=[turn_cuts(r) for r in chunk])
        vals = values.float().cpu().tolist()
        k = 0
        for r in chunk:
            out[index[id(r)]] = vals[k: k + len(r.value_pos)]
            k += len(r.value_pos)
    return [out[k] for k in range(len(rows))]
