"""A run folder to serve or export, made in a second: the tiny model with a non-zero LoRA adapter (a fresh
adapter's B matrices are zero, which would make "the adapter is applied" untestable)."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from selfevolve.config import load_config
from selfevolve.train.checkpoint import save_checkpoint
from selfevolve.train.trainer import build_policy


def make_run(root: Path, seed: int = 0, scale: float = 0.5):
    """``(run folder, policy)``: a checkpoint at step 1 whose adapter is random (std ``scale``)."""
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32", f"seed={seed}", f"train.out_dir={root}"])
    policy = build_policy(cfg)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
    save_checkpoint(root, 1, adapter=policy.adapter_state(), optimizer=None, state={"task_cursor": 0}, rng={},
                    config_yaml=yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return root, policy
