"""The run folder: whether a folder already holds a run, what a resume may change, and what an overwrite
removes (only what a run writes: the folder may hold other things too)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from selfevolve.config import BEFORE_IT_EXISTED, Config, _parse_value, save_config
from selfevolve.envs import env_class, env_options
from selfevolve.errors import ConfigError, SelfEvolveError
from selfevolve.experience.pool import FILE as POOL_FILE
from selfevolve.models.llm import LOG as LLM_LOG
from selfevolve.train.metrics import WARM_LOG
from selfevolve.view.record import EVAL_LOG
from selfevolve.untrusted import load_yaml

# Sections that define a run: resuming with different values would silently train something else.
RUN_DEFINING = ("seed", "model", "env", "agent", "algo", "reward", "filter", "sampling", "rollout", "search", "experience")
# JSONL records keyed by step (a resume drops those after its checkpoint)
STEP_LOGS = ("metrics.jsonl", "trajectories.jsonl", "search_trees.jsonl", EVAL_LOG, WARM_LOG, LLM_LOG)
RUN_FILES = ("config.yaml", *STEP_LOGS, "tensorboard", "checkpoints", POOL_FILE)


def _run_view(dump: dict, section: str, defaults: dict):
    """A config section as compared on resume: a setting the saved run does not name (the section or the field was
    added to the library since) ran with its default (``defaults``: a default config's dump) or, where that
    default changed the behaviour, with :data:`BEFORE_IT_EXISTED`'s; env options get their defaults filled in."""
    default = defaults.get(section)
    value = dump.get(section)
    if value is None:  # a run saved before the section existed (or with it empty) ran with its defaults
        value = {} if isinstance(default, dict) else default
    if isinstance(value, dict) and isinstance(default, dict):
        value = {**default, **BEFORE_IT_EXISTED.get(section, {}), **value}
    if section == "env" and isinstance(value, dict):
        try:
            value = {**env_options(env_class(value.get("name"))), **value}
        except ConfigError:  # a user's own class (the caller passes it in Python): compared as written
            pass
    return value


def resume_differences(saved: dict, now: dict, sections) -> list[str]:
    """The settings of ``sections`` whose values differ between a saved run's config dump and this config's,
    each named as ``section.field`` (a section that is one value, such as ``seed``, by its name)."""
    diff, defaults = [], Config().model_dump(mode="json")
    for section in sections:
        old, new = _run_view(saved, section, defaults), _run_view(now, section, defaults)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            diff += [f"{section}.{k}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        else:
            diff.append(section)
    return diff


def as_it_ran(saved: dict, names: list[str]) -> str:
    """``section.field=value`` overrides that give back the saved run's values of ``names`` (from
    :func:`resume_differences`), e.g. after a default changed; a whole-section name (``seed``) as ``seed=value``.
    Each value is written so that the override parser reads it back (JSON where a plain string would not be),
    each override quoted for a shell where needed; a field the saved run lacks, and a whole section, are left out."""
    defaults = Config().model_dump(mode="json")
    out = []
    for name in names:
        section, _, key = name.partition(".")
        value = _run_view(saved, section, defaults)
        if key:
            if not isinstance(value, dict) or key not in value:
                continue  # e.g. an option of another environment than the saved run's
            value = value[key]
        if isinstance(value, dict):
            continue
        plain = isinstance(value, str) and _parse_value(value) == value
        text = value if plain else json.dumps(list(value) if isinstance(value, tuple) else value)
        out.append(shlex.quote(f"{name}={text}"))
    return " ".join(out)


def resume_hint(saved: dict, names: list[str]) -> str:
    """The end of a refused resume: `` (to resume it as it ran, add: ...)`` with :func:`as_it_ran`'s overrides, or
    nothing when there are none to give."""
    back = as_it_ran(saved, names)
    return f" (to resume it as it ran, add: {back})" if back else ""


def is_run(out: Path) -> bool:
    return (out / "config.yaml").is_file() and ((out / "checkpoints").is_dir() or (out / "metrics.jsonl").is_file())


def resumed_config(cfg: Config, out: Path) -> dict | None:
    """The saved config of the run in ``out`` that ``cfg`` resumes; None when it starts one."""
    if not (cfg.train.resume and is_run(out)):
        return None
    return load_yaml((out / "config.yaml").read_text(encoding="utf-8", errors="replace"), out / "config.yaml")


def check_out_dir(cfg: Config, out: Path, saved: dict | None) -> None:
    """Refuse a file, a run that would be silently replaced, and a resume whose run-defining settings differ
    (``saved``: :func:`resumed_config`, read once by the caller)."""
    if out.exists() and not out.is_dir():
        raise SelfEvolveError(f"train.out_dir={str(out)!r} is a file, not a folder")
    # the folder is created later (after the model loads): a file on its path would stop it there
    blocking = next((p for p in out.absolute().parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise SelfEvolveError(f"train.out_dir={str(out)!r} cannot be created: {blocking} is a file, not a folder")
    if is_run(out) and not cfg.train.resume and not cfg.train.overwrite:
        raise SelfEvolveError(
            f"train.out_dir={str(out)!r} already holds a run. Continue it with train.resume=true, "
            f"replace it with train.overwrite=true, or choose another train.out_dir."
        )
    if saved is not None:
        diff = resume_differences(saved, cfg.model_dump(mode="json"), RUN_DEFINING)
        if diff:
            raise SelfEvolveError(
                f"cannot resume {out}: its {', '.join(diff)} settings differ from this config "
                f"(see {out / 'config.yaml'}); only train.* and eval.* may change on resume" + resume_hint(saved, diff)
            )


def init_out_dir(cfg: Config, out: Path) -> None:
    """Create the folder (removing an old run's files when overwriting) and write the resolved config."""
    if is_run(out) and not cfg.train.resume and cfg.train.overwrite:
        for name in RUN_FILES:
            p = out / name
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
        save_config(cfg, out / "config.yaml")
    except OSError as e:  # no permission, a read-only or full disk
        raise SelfEvolveError(f"cannot write the run folder train.out_dir={str(out)!r} ({e.strerror or e})") from None
