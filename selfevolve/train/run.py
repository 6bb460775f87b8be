"""Loading a finished (or interrupted) run back: for ``selfevolve eval`` and for Python users."""

from __future__ import annotations

from pathlib import Path

from selfevolve.build import acting_only, build_policy, build_prompt, resolve_env
from selfevolve.config import Config, apply_override, _validate
from selfevolve.envs import make_env
from selfevolve.errors import ConfigError
from selfevolve.train.checkpoint import MODEL_FILES, find_checkpoint, load_checkpoint, refusing
from selfevolve.train.evaluate import eval_env_options, evaluate
from selfevolve.untrusted import load_yaml


def load_run(path: str | Path, overrides: list[str] | None = None, full_precision: bool = False):
    """``(config, policy, checkpoint_state)`` from a run folder or checkpoint folder, for acting (nothing here
    updates: ``build.acting_only``). ``full_precision``: the model's products in its own dtype whatever
    ``model.matmul_dtype`` the run trained with (a merge needs the full-precision weights: ``selfevolve export``)."""
    ckpt = find_checkpoint(path, need=MODEL_FILES)
    data = load_checkpoint(ckpt, with_optimizer=False)
    raw = load_yaml(data["config_yaml"], ckpt / "config.yaml")
    for o in overrides or []:
        key = o.partition("=")[0].strip()
        if not key.startswith("eval."):
            raise ConfigError(f"only eval.* keys can be changed when evaluating a run, got {key!r}")
        apply_override(raw, o)
    cfg: Config = _validate(raw)
    policy = build_policy(acting_only(cfg, full_precision))
    with refusing(ckpt / "adapter.safetensors"):
        policy.load_adapter_state(data["adapter"], value_head="ignore")  # acting needs no critic
    return cfg, policy, data["state"]


def evaluate_checkpoint(path: str | Path, overrides: list[str] | None = None, env=None) -> dict:
    """Held-out evaluation of a run's latest (or a given) checkpoint. ``env``: the TextEnv class of a run
    trained on a user-defined environment (the CLI can only rebuild registered ones)."""
    cfg, policy, state = load_run(path, overrides)
    env_cls = resolve_env(cfg, env)
    options = cfg.env.options()
    builder = build_prompt(cfg, policy, make_env(env_cls, **options))
    experience = None
    if cfg.experience.enabled and cfg.eval.experience == "on":  # the run's pool as of this checkpoint, read-only
        from selfevolve.experience.guide import Experience

        experience = Experience.at_checkpoint(cfg, find_checkpoint(path, need=MODEL_FILES).parent.parent, state["step"], policy,
                                              env_cls, options, cfg.env.name)
    res = evaluate(policy, env_cls, eval_env_options(env_cls, options, cfg.eval.env), builder,
                   episodes=cfg.eval.episodes, pass_k=cfg.eval.pass_k,
                   seed_offset=cfg.eval.seed_offset, sample_seed=cfg.seed, experience=experience,
                   accumulate=cfg.eval.accumulate, chunk=cfg.eval.chunk, batch=cfg.eval.batch, seen=_seen(state),
                   general=cfg.eval.general, adapter_scale=cfg.eval.adapter_scale)
    if cfg.eval.general:  # beside the base model: the adapter off, same questions
        from selfevolve.train.general import general_knowledge

        res["eval/general_base"] = general_knowledge(policy, base=True)["correct"]
    return {"checkpoint_step": state["step"], "episodes": cfg.eval.episodes, **res}


def _seen(state: dict) -> set[str]:
    """The content digests a checkpoint's run trained on (none recorded by runs older than the record)."""
    seen = state.get("seen", [])
    return {s for s in seen if isinstance(s, str)} if isinstance(seen, list) else set()
