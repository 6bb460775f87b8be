"""Checkpoints: everything a run needs to continue exactly where it stopped — and nothing that can run code.

A checkpoint folder ``<out_dir>/checkpoints/step-<N>/`` holds the LoRA adapter (``adapter.safetensors``, and a
standard PEFT folder under ``adapter/`` for use outside selfevolve), the optimizer state
(``optimizer.safetensors``: its tensors, with the rest as JSON in the file's metadata), the RNG states
(``rng.json``: Python's, torch's and the sampling generator's), the task cursor (``state.json``) and the
resolved config. It is written to a temporary folder and renamed into place, and ``latest`` is updated last
(atomic replace): a crash, Ctrl-C or SIGTERM at any moment leaves the previous checkpoint valid.

Run folders are shared (resume, ``model.init_from``, ``selfevolve eval``), so loading one must be safe when it
comes from someone else: nothing is unpickled. Checkpoints of selfevolve before 0.2 pickled their optimizer and
RNG state (``optimizer.pt``, ``rng.pt``); those files are never opened — such a checkpoint can still be
evaluated or used as ``model.init_from`` (both read only the adapter, ``state.json`` and ``config.yaml``), but
not resumed. Every malformed file is refused with a :class:`~selfevolve.errors.SelfEvolveError` naming it.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from selfevolve.errors import SelfEvolveError
from selfevolve.untrusted import loads_json

KEEP_LAST = 2
MODEL_FILES = ("state.json", "adapter.safetensors", "config.yaml")  # what evaluation and init_from read
CKPT_FILES = (*MODEL_FILES, "optimizer.safetensors", "rng.json")  # what an exact resume reads
PICKLES = ("optimizer.pt", "rng.pt")  # written before 0.2; never loaded
_OPTIMIZER_META = "selfevolve.optimizer"


class NoCheckpoint(SelfEvolveError):
    """The folder holds no checkpoint at all (a resume then starts from scratch)."""


def checkpoints_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


# ---- the files' formats (pure functions: state in memory <-> what is written) -----------------------------
def optimizer_to_file(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """An optimizer's ``state_dict()`` as safetensors tensors (``state.<param>.<name>``) plus metadata holding
    everything else as JSON (``param_groups`` and any non-tensor per-parameter values)."""
    tensors, scalars = {}, {}
    for pid, values in state_dict["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{pid}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[name] = value
    meta = {"param_groups": state_dict["param_groups"], "scalars": scalars}
    return tensors, {_OPTIMIZER_META: json.dumps(meta)}


def optimizer_from_file(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None) -> dict[str, Any]:
    """The inverse of :func:`optimizer_to_file`; ValueError naming what is malformed."""
    if not metadata or _OPTIMIZER_META not in metadata:
        raise ValueError("no optimizer metadata")
    meta = loads_json(metadata[_OPTIMIZER_META])
    if not isinstance(meta, dict) or not isinstance(meta.get("param_groups"), list) \
            or not isinstance(meta.get("scalars", {}), dict):
        raise ValueError("malformed optimizer metadata")
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        kind, pid, name = (key.split(".", 2) + ["", ""])[:3]
        if kind != "state" or not pid.isdecimal() or not name:
            raise ValueError(f"unexpected tensor {key!r}")
        state.setdefault(int(pid), {})[name] = value
    for pid, values in meta.get("scalars", {}).items():
        if not pid.isdecimal() or not isinstance(values, dict):
            raise ValueError(f"malformed state of parameter {pid!r}")
        state.setdefault(int(pid), {}).update(values)
    groups = meta["param_groups"]
    if not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups):
        raise ValueError("malformed param_groups")
    return {"state": state, "param_groups": groups}


def _bytes(t: torch.Tensor) -> str:
    return base64.b64encode(t.detach().cpu().to(torch.uint8).numpy().tobytes()).decode("ascii")


def _tensor(text: Any) -> torch.Tensor:
    if not isinstance(text, str):
        raise ValueError("an RNG state must be a base64 string")
    return torch.frombuffer(bytearray(base64.b64decode(text, validate=True)), dtype=torch.uint8)


def _python_state(value: Any) -> tuple:
    """A ``random.getstate()`` tuple from its JSON form, checked by ``random.Random.setstate`` itself."""
    if not (isinstance(value, list) and len(value) == 3 and isinstance(value[1], list)):
        raise ValueError("a Python RNG state must be [version, [625 integers], gauss_next]")
    state = (value[0], tuple(value[1]), value[2])
    random.Random().setstate(state)  # raises TypeError/ValueError on anything but a real state
    return state


def rng_to_json(rng: dict[str, Any]) -> str:
    """RNG states as JSON: Python states as lists, torch states (byte tensors) as base64."""
    return json.dumps({k: _bytes(v) if isinstance(v, torch.Tensor) else v for k, v in rng.items()})


def rng_from_json(text: str) -> dict[str, Any]:
    """The inverse of :func:`rng_to_json`, checked: ``python`` (and ``experience``) must be Python RNG states,
    ``torch`` and ``sampler`` byte strings; ValueError/TypeError otherwise."""
    data = loads_json(text)
    if not isinstance(data, dict) or not {"python", "torch", "sampler"} <= set(data):
        raise ValueError("expected the keys python, torch and sampler")
    out = {"python": _python_state(data["python"]), "torch": _tensor(data["torch"]),
           "sampler": _tensor(data["sampler"])}
    if data.get("experience") is not None:
        out["experience"] = _python_state(data["experience"])
    return out


def _check_state(state: Any) -> dict[str, Any]:
    if not isinstance(state, dict):
        raise ValueError("expected a JSON object")
    for key in ("step", "task_cursor"):
        value = state.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key!r} must be an integer >= 0, got {value!r}")
    last_eval = state.get("last_eval", {})
    if not isinstance(last_eval, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  for v in last_eval.values()):
        raise ValueError("'last_eval' must map names to numbers")
    return state


# ---- writing ----------------------------------------------------------------------------------------------
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
    remove_partial_writes(out_dir)
    final = root / f"step-{step}"
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
    try:
        save_file({k: v.contiguous() for k, v in adapter.items()}, str(tmp / "adapter.safetensors"))
        if policy is not None:
            policy.save_adapter(tmp / "adapter")  # a plain PEFT folder, for use outside selfevolve
        if optimizer is not None:
            tensors, metadata = optimizer_to_file(optimizer.state_dict())
            save_file(tensors, str(tmp / "optimizer.safetensors"), metadata=metadata)
        (tmp / "rng.json").write_text(rng_to_json(rng))
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1))
        (tmp / "config.yaml").write_text(config_yaml)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _write_atomic(root / "latest", final.name)
    for old in sorted(root.glob("step-*"), key=_step_number)[:-KEEP_LAST]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def remove_partial_writes(out_dir: str | Path) -> list[str]:
    """Remove what a killed checkpoint write left in ``checkpoints/`` (``.tmp-*`` folders, ``latest.tmp``):
    never a checkpoint, since a checkpoint only exists once renamed to ``step-N``. Returns the names removed.
    Called on resume and before every write (one process writes a run's checkpoints)."""
    root = checkpoints_dir(out_dir)
    removed = []
    for p in [*root.glob(".tmp-*"), root / "latest.tmp"]:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists() or p.is_symlink():
            p.unlink(missing_ok=True)
        else:
            continue
        removed.append(p.name)
    return removed


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _step_number(path: Path) -> int:
    tail = path.name.split("-", 1)[-1]
    return int(tail) if tail.isascii() and tail.isdecimal() and len(tail) < 19 else -1


# ---- finding and reading ----------------------------------------------------------------------------------
def _complete(folder: Path, need: tuple[str, ...]) -> bool:
    return all((folder / f).is_file() for f in need)


def _pickled(folder: Path) -> bool:
    """A checkpoint of selfevolve before 0.2: complete but for its state, which it pickled."""
    return _complete(folder, MODEL_FILES) and not _complete(folder, CKPT_FILES) and \
        any((folder / f).is_file() for f in PICKLES)


def _pickle_error(folder: Path) -> SelfEvolveError:
    return SelfEvolveError(
        f"{folder}: written by selfevolve before 0.2, which pickled the optimizer and RNG state "
        f"({', '.join(f for f in PICKLES if (folder / f).exists())}); pickles are never loaded (unpickling can "
        f"run code), so this checkpoint cannot be resumed. It can still be evaluated (`selfevolve eval`) or "
        f"used as model.init_from.")


def find_checkpoint(path: str | Path, need: tuple[str, ...] = CKPT_FILES) -> Path:
    """A checkpoint folder from either a run folder (its latest checkpoint holding the files ``need``) or a
    checkpoint folder itself. ``need``: :data:`CKPT_FILES` to resume, :data:`MODEL_FILES` to evaluate."""
    path = Path(path)
    if not path.exists():
        raise NoCheckpoint(f"no such run or checkpoint folder: {path}")
    if (path / "state.json").is_file():
        if not _complete(path, need) and _pickled(path):
            raise _pickle_error(path)
        missing = [f for f in need if not (path / f).is_file()]
        if missing:
            raise SelfEvolveError(f"{path}: incomplete checkpoint (missing {', '.join(missing)})")
        return path
    root = checkpoints_dir(path)
    latest = root / "latest"
    if latest.is_file():
        ckpt = root / latest.read_text(errors="replace").strip()
        if ckpt.parent == root and _complete(ckpt, need):
            return ckpt
    folders = sorted((p.parent for p in root.glob("step-*/state.json")), key=_step_number)
    complete = [f for f in folders if _complete(f, need)]
    if complete:
        return complete[-1]
    if any(_pickled(f) for f in folders):
        raise _pickle_error(next(f for f in reversed(folders) if _pickled(f)))
    raise NoCheckpoint(f"{path} holds no checkpoint (expected {root}/step-N/ or a checkpoint folder)")


def load_checkpoint(ckpt: Path, with_optimizer: bool = True, with_rng: bool | None = None) -> dict[str, Any]:
    """The checkpoint's parts, everything on the CPU (a GPU run's checkpoint loads on a CPU-only machine):
    ``state``, ``adapter``, ``config_yaml`` always; ``optimizer`` and ``rng`` for a resume (``with_rng``
    defaults to ``with_optimizer``). A missing or malformed file is a SelfEvolveError that names it."""
    with_rng = with_optimizer if with_rng is None else with_rng
    out: dict[str, Any] = {}
    current = ckpt / "state.json"
    try:
        out["state"] = _check_state(loads_json(current.read_text(encoding="utf-8")))
        current = ckpt / "adapter.safetensors"
        out["adapter"] = load_file(str(current))
        current = ckpt / "config.yaml"
        out["config_yaml"] = current.read_text(encoding="utf-8")
        if with_rng:
            current = ckpt / "rng.json"
            out["rng"] = rng_from_json(current.read_text(encoding="utf-8"))
        if with_optimizer:
            current = ckpt / "optimizer.safetensors"
            with safe_open(str(current), framework="pt", device="cpu") as f:
                tensors = {k: f.get_tensor(k) for k in f.keys()}
                metadata = f.metadata()
            out["optimizer"] = optimizer_from_file(tensors, metadata)
    except FileNotFoundError:
        if _pickled(ckpt):
            raise _pickle_error(ckpt) from None
        raise SelfEvolveError(f"{current}: missing (incomplete checkpoint)") from None
    except (OSError, ValueError, TypeError, UnicodeDecodeError, SafetensorError) as e:
        raise SelfEvolveError(f"{current}: corrupt or not a selfevolve checkpoint file ({e})") from None
    return out


@contextmanager
def refusing(path: Path):
    """Errors while applying a loaded file (a tensor of the wrong shape, an RNG state of the wrong size, an
    optimizer state of another model) become a SelfEvolveError naming the file."""
    try:
        yield
    except (RuntimeError, ValueError, TypeError, KeyError, IndexError) as e:
        raise SelfEvolveError(f"{path}: does not fit this run ({str(e)[:300]})") from None


def load_init_adapter(cfg, policy, optimizer: torch.optim.Optimizer | None = None) -> bool:
    """``model.init_from``: load another run's adapter (its latest checkpoint) into ``policy``; whether one was
    loaded. The trainer's new runs start from it, and ``selfevolve explore`` explores with it (the agent being
    trained, as AgentEvolver explores). With ``model.init_optimizer`` and an ``optimizer``, that checkpoint's
    optimizer state is loaded into it too (:func:`continue_optimizer`)."""
    if not cfg.model.init_from:
        return False
    carry = optimizer is not None and cfg.model.init_optimizer
    ckpt = find_checkpoint(cfg.model.init_from, need=MODEL_FILES)
    if carry and not (ckpt / "optimizer.safetensors").is_file():  # the same checkpoint's, never an older one's
        raise SelfEvolveError(f"{ckpt}: no optimizer.safetensors to continue (model.init_optimizer=true); set "
                              f"model.init_optimizer=false to start a fresh optimizer from its adapter")
    data = load_checkpoint(ckpt, with_optimizer=carry, with_rng=False)
    with refusing(ckpt / "adapter.safetensors"):
        policy.load_adapter_state(data["adapter"], value_head="optional")
    if carry:
        with refusing(ckpt / "optimizer.safetensors"):
            continue_optimizer(optimizer, data["optimizer"])
    return True


def continue_optimizer(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load another run's optimizer ``state`` (its moments and step counts) into ``optimizer`` while keeping
    ``optimizer``'s own hyperparameters (learning rate, weight decay, betas: this run's configuration). A state
    of other parameters (another adapter or value head) is a ValueError naming the first that differs."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    saved = state.get("state", {})
    for i, p in enumerate(params):
        for name, t in saved.get(i, {}).items():
            if torch.is_tensor(t) and t.dim() and t.shape != p.shape:
                raise ValueError(f"parameter {i}: {name} of shape {tuple(t.shape)}, this run's is {tuple(p.shape)}")
    own = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)  # ValueError when the number of parameters differs
    for g, hyper in zip(optimizer.param_groups, own):
        g.update(hyper)
