"""From trajectories to token-level training rows (the ``Sample`` of the architecture).

One row per step: the exact prompt ids the model saw followed by the exact ids it produced. Only the produced
ids carry loss (``loss_mask``), each with its old log-prob and its advantage. Nothing is re-tokenised: a row is
a concatenation of ids recorded at rollout time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfevolve.types import Trajectory


@dataclass
class Row:
    ids: list[int]
    action_start: int  # index of the first generated token in ids
    old_logprobs: list[float]
    advantages: list[float]  # one per generated token

    def __len__(self) -> int:
        return len(self.ids)


def build_rows(trajs: list[Trajectory], traj_advantages: list[float]) -> list[Row]:
    """One row per step; the trajectory's advantage is broadcast to every generated token of every step."""
    rows = []
    for traj, adv in zip(trajs, traj_advantages):
        for step in traj.steps:
            if not step.action_ids:
                continue
            rows.append(
                Row(
                    ids=list(step.prompt_ids) + list(step.action_ids),
                    action_start=len(step.prompt_ids),
                    old_logprobs=list(step.logprobs),
                    advantages=[float(adv)] * len(step.action_ids),
                )
            )
    return rows


def collate(rows: list[Row], pad_id: int, device=None) -> dict[str, torch.Tensor]:
    """Right-padded tensors; ``old_logprobs``/``advantages`` are flat, in the order of ``loss_mask.nonzero()``."""
    L = max(len(r) for r in rows)
    B = len(rows)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    loss_mask = torch.zeros((B, L), dtype=torch.long)
    old, adv = [], []
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r.ids)
        attn[i, : len(r)] = 1
        loss_mask[i, r.action_start : len(r)] = 1
        old.extend(r.old_logprobs)
        adv.extend(r.advantages)
    out = {
        "input_ids": ids,
        "attention_mask": attn,
        "loss_mask": loss_mask,
        "old_logprobs": torch.tensor(old, dtype=torch.float32),
        "advantages": torch.tensor(adv, dtype=torch.float32),
    }
    return {k: v.to(device) for k, v in out.items()} if device is not None else out


def micro_batches(rows: list[Row], max_tokens: int) -> list[list[Row]]:
    """Split rows (sorted by length, to waste little padding) into chunks of at most ``max_tokens`` padded tokens."""
    chunks, cur, cur_max = [], [], 0
    for r in sorted(rows, key=len):
        new_max = max(cur_max, len(r))
        if cur and new_max * (len(cur) + 1) > max_tokens:
            chunks.append(cur)
            cur, new_max = [], len(r)
        cur.append(r)
        cur_max = new_max
    if cur:
        chunks.append(cur)
    return chunks
