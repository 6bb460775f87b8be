"""``selfevolve export RUN --out DIR``: a run as a standalone Hugging Face model folder.

The LoRA adapter is merged into the base weights (peft's ``merge_and_unload``: W + (alpha/r)·B·A per target
module), and the result written with ``save_pretrained`` (safetensors, no pickles) beside the tokenizer (chat
template included) and ``selfevolve_export.json`` (where it came from: the run's folder name and the checkpoint's
path inside the run, never an absolute path, so that the folder can be shared without telling where it was
made). Anything that loads Hugging Face folders can then use it — ``AutoModelForCausalLM.from_pretrained(DIR)``, vLLM, ``model.name=DIR`` in selfevolve —
without selfevolve or peft.

A merge can go wrong quietly (a target module the merge skips, a tied embedding written twice, a dtype
rounding the delta away), so the export checks itself: the folder is written to a temporary place, reloaded
from disk, and its logits on a probe sequence compared with the adapter model's. Only when they agree within
:func:`tolerance` is it renamed into place; otherwise nothing is written and the error gives the difference.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from selfevolve.errors import SelfEvolveError
from selfevolve.models.loading import replace_folder
from selfevolve.train.checkpoint import MODEL_FILES, find_checkpoint

INFO_FILE = "selfevolve_export.json"


def tolerance(dtype: torch.dtype, scale: float) -> float:
    """Largest |logit difference| accepted, for logits up to ``scale`` in size: merging reorders fp32 sums (a
    relative ~2e-5 was measured on the tiny model with a large random adapter); half precision rounds the merged
    weights themselves."""
    return max(1e-3, 1e-4 * scale) if dtype == torch.float32 else max(1e-1, 1e-2 * scale)


def probe_ids(tokenizer, length: int = 64) -> list[int]:
    """A chat prompt followed by spread-out vocabulary ids: every position's logits are compared."""
    from selfevolve.agent.prompt import render_chat

    ids = render_chat(tokenizer, [{"role": "user", "content": "Check the export: go left, then down twice."}])
    step = max(1, len(tokenizer) // length)
    return ids + list(range(3, len(tokenizer), step))[:length]


@torch.no_grad()
def logits_of(model, ids: list[int]) -> torch.Tensor:
    device = next(model.parameters()).device
    return model(input_ids=torch.tensor([ids], device=device)).logits[0].float().cpu()


def model_label(name: str) -> str:
    """The base model as the export records it: a registered name or hub id as it is, a local folder by its
    name only (its path says where it lived on the machine that trained, which is nobody else's business)."""
    path = Path(name).expanduser()
    return path.name if path.is_absolute() or path.exists() else name


def _check_target(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise SelfEvolveError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise SelfEvolveError(f"--out {out}: the folder is not empty (pass --overwrite to replace it)")


def merged_model(policy):
    """The policy's model with the adapter merged into its weights (a plain transformers model)."""
    from peft import PeftModel

    model = policy.model
    return model.merge_and_unload() if isinstance(model, PeftModel) else model


def export_run(run_dir: str | Path, out_dir: str | Path, overwrite: bool = False) -> dict:
    """Write the merged model of ``run_dir``'s latest checkpoint to ``out_dir``; returns the check's report."""
    from transformers import AutoModelForCausalLM

    from selfevolve.train.run import load_run

    out = Path(out_dir)
    _check_target(out, overwrite)
    cfg, policy, state = load_run(run_dir, full_precision=True)  # merged into fp32 weights, not bf16 ones
    ckpt = find_checkpoint(run_dir, need=MODEL_FILES).resolve()  # the one load_run loaded
    probe = probe_ids(policy.tokenizer)
    expected = logits_of(policy.model, probe)  # the adapter model in full precision (as served, but for matmul_dtype)
    model = merged_model(policy)
    dtype = next(model.parameters()).dtype
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-export-"))
    try:
        model.save_pretrained(tmp)  # safetensors
        policy.tokenizer.save_pretrained(tmp)
        reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype=dtype).to(next(model.parameters()).device)
        reloaded.eval()
        diff = float((logits_of(reloaded, probe) - expected).abs().max())
        tol = tolerance(dtype, float(expected.abs().max()))
        if not diff <= tol:  # `not <=`: a NaN fails too
            raise SelfEvolveError(f"export check failed: the reloaded model's logits differ from the adapter "
                                  f"model's by up to {diff:.3g} (tolerance {tol:.3g}); nothing written")
        report = {"run": ckpt.parent.parent.name, "checkpoint": f"{ckpt.parent.name}/{ckpt.name}",
                  "checkpoint_step": state["step"], "base_model": model_label(cfg.model.name), "dtype": str(dtype).removeprefix("torch."),
                  "lora": cfg.model.lora.model_dump(), "max_abs_logit_diff": diff, "positions": len(probe)}
        (tmp / INFO_FILE).write_text(json.dumps(report, indent=1))
        # mkdtemp made the folder private and the weights file is written 0600: a model folder is meant to be
        # shared (served by another user, copied to a cluster), so it gets the usual permissions
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        replace_folder(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report
