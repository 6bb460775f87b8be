"""Checkpoints: everything a run needs to continue exactly where it stopped.

A checkpoint folder ``<out_dir>/checkpoints/step-<N>/`` holds the LoRA adapter (a standard PEFT folder under
``adapter/``), the optimizer state, the RNG states (Python, torch, the sampling generator), the task cursor,
and the resolved config. It is written to a temporary folder and renamed into place, and ``latest`` is
updated last (atomic replace): a crash or Ctrl-C at any moment leaves the previous checkpoint valid.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from selfevolve.errors import SelfEvolveError

KEEP_LAST = 2
CKPT_FILES = ("state.json", "adapter.safetensors", "optimizer.pt", "rng.pt", "config.yaml")


def checkpoints_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def save_checkpoint(
    out_dir: str | Path,
    step: int,
    *,
    adapter: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
    rng: dict[str, Any],
    config_yaml: str,
    policy=None,
) -> Path:
    root = checkpoints_dir(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
    try:
        save_file({k: v.contiguous() for k, v in adapter.items()}, str(tmp / "adapter.safetensors"))
        if policy is not None:
            policy.save_adapter(tmp / "adapter")  # a plain PEFT folder, for use outside selfevolve
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(rng, tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1))
        (tmp / "config.yaml").write_text(config_yaml)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _write_atomic(root / "latest", final.name)
    for old in sorted(root.glob("step-*"), key=lambda p: int(p.name.split("-")[1]))[:-KEEP_LAST]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder from either a run folder (its latest checkpoint) or a checkpoint folder itself."""
    path = Path(path)
    if not path.exists():
        raise SelfEvolveError(f"no such run or checkpoint folder: {path}")
    if (path / "state.json").is_file():
        missing = [f for f in CKPT_FILES if not (path / f).is_file()]
        if missing:
            raise SelfEvolveError(f"{path}: incomplete checkpoint (missing {', '.join(missing)})")
        return path
    root = checkpoints_dir(path)
    latest = root / "latest"
    if latest.is_file():
        ckpt = root / latest.read_text().strip()
        if all((ckpt / f).is_file() for f in CKPT_FILES):
            return ckpt
    steps = sorted(root.glob("step-*/state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    steps = [p.parent for p in steps if all((p.parent / f).is_file() for f in CKPT_FILES)]
    if steps:
        return steps[-1]
    raise SelfEvolveError(f"{path} holds no checkpoint (expected {root}/step-N/ or a checkpoint folder)")


def load_checkpoint(ckpt: Path, with_optimizer: bool = True) -> dict[str, Any]:
    """Everything on the CPU (a GPU run's checkpoint loads on a CPU-only machine); ``optimizer`` only if asked."""
    try:
        out = {
            "state": json.loads((ckpt / "state.json").read_text()),
            "adapter": load_file(str(ckpt / "adapter.safetensors")),
            "rng": torch.load(ckpt / "rng.pt", weights_only=False, map_location="cpu"),
            "config_yaml": (ckpt / "config.yaml").read_text(),
        }
        if with_optimizer:
            out["optimizer"] = torch.load(ckpt / "optimizer.pt", weights_only=False, map_location="cpu")
    except (OSError, ValueError, RuntimeError) as e:
        raise SelfEvolveError(f"{ckpt}: incomplete or corrupt checkpoint ({e})") from None
    return out
