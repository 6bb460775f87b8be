"""What a run is built from: the environment class, the LoRA policy and the prompt builder of a config.

Shared by the trainer, evaluation, self-questioning and the Ray rollout workers (each worker builds its own
policy replica from the same config, ``selfevolve/distributed/worker.py``), so it sits below all of them.
"""

from __future__ import annotations

from selfevolve.agent.context import ContextSpec
from selfevolve.agent.prompt import PromptBuilder
from selfevolve.config import BEFORE_IT_EXISTED, Config
from selfevolve.envs import check_env_config, env_class
from selfevolve.envs.base import TextEnv
from selfevolve.errors import ConfigError
from selfevolve.models import decode_attention, matmul_precision
from selfevolve.models.loading import DTYPES, load_model
from selfevolve.models.policy import Policy


def resolve_env(cfg: Config, env: type[TextEnv] | None) -> type[TextEnv]:
    """The environment class of a run: ``env`` (a TextEnv subclass given in Python) or the class ``env.name``
    names. The ``env.*`` and ``eval.env.*`` options are checked against that class, before anything slow."""
    if env is not None:
        if not (isinstance(env, type) and issubclass(env, TextEnv)):
            raise ConfigError(f"env must be a TextEnv subclass, got {env!r}")
        cls = env
    else:
        cls = env_class(cfg.env.name)
    check_env_config(cls, getattr(cls, "name", cls.__name__) if env is not None else cfg.env.name,
                     cfg.env.options(), cfg.eval.env)
    return cls


def build_policy(cfg: Config, value_head: str | None = None) -> Policy:
    """The LoRA policy of ``cfg.model``, with a value head of kind ``value_head`` on its body when given (the
    objective's: ``objectives.value_head_kind(cfg)``)."""
    model, tok = load_model(cfg.model.name, cfg.model.dtype, seed=cfg.seed)
    policy = Policy(model, tok, lora=cfg.model.lora, temperature=cfg.agent.temperature,
                    max_new_tokens=cfg.agent.max_new_tokens)
    policy.check_logprob_path()
    sample_in_other_precision(policy, cfg.model)
    products_in_other_precision(policy, cfg.model)
    if value_head is not None:
        policy.attach_value_head(value_head)
    return policy


def sample_in_other_precision(policy: Policy, model_cfg) -> None:
    """``model.sampler_dtype``: generation in bf16 while the update keeps the model's fp32
    (``models/sampler_precision.py``); nothing where the model computes in that precision already."""
    if model_cfg.sampler_dtype == "same":
        return
    dtype = DTYPES[model_cfg.sampler_dtype]
    if next(policy.model.parameters()).dtype == dtype:
        return
    policy.sample_in(dtype)
    decode_attention.use_for(policy.model, dtype)


def products_in_other_precision(policy: Policy, model_cfg) -> None:
    """``model.matmul_dtype``: the frozen body's matrix products in bf16, everything else in the model's fp32
    (``models/matmul_precision.py``), in every forward or (``bf16_update``) in the update's alone; nothing where
    the model computes in that precision already. ``auto`` is chosen where a run starts (:func:`resolve_products`);
    a config that still says ``auto`` builds a policy that only acts (exploring, serving), so it is 'same' here."""
    choice = model_cfg.matmul_dtype
    if choice in ("same", "auto"):
        return
    dtype = DTYPES["bf16"]
    if next(policy.model.parameters()).dtype == dtype:
        return
    if choice == "bf16_update":
        policy.update_products = matmul_precision.UpdateProducts(policy.model, dtype)
    else:
        matmul_precision.products_in(policy.model, dtype)
    policy.matmul_dtype = dtype


def resolve_products(cfg: Config, saved: dict | None = None, console=None) -> Config:
    """``cfg`` with ``model.matmul_dtype=auto`` made concrete, so that the run folder records the precision that
    ran. ``saved``: the config dump of the run being resumed, whose choice it keeps, whatever this machine would
    choose (a run saved before the setting existed ran with 'same'). ``console``: where to say that this CPU's
    choice is bf16_update (the run's numbers then differ from an fp32 machine's)."""
    if cfg.model.matmul_dtype != "auto":
        return cfg
    older = BEFORE_IT_EXISTED["model"]["matmul_dtype"]
    choice = (saved.get("model") or {}).get("matmul_dtype", older) if saved is not None else "auto"
    if choice == "auto":
        choice = matmul_precision.auto_choice(cfg.model)
        if choice == "bf16_update" and console is not None:
            console.print("model.matmul_dtype=auto: the update's products in bf16 (this CPU has bf16 arithmetic; "
                          "model.matmul_dtype=same keeps fp32 throughout)")
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"matmul_dtype": choice})})


def acting_only(cfg: Config, full_precision: bool = False) -> Config:
    """``cfg`` for a policy that never updates (evaluation, serving, export, a Ray rollout worker):
    ``model.matmul_dtype=bf16_update`` changes only the update, so its bf16 copy (0.21 GB) is not made there.
    ``full_precision``: no ``model.matmul_dtype`` at all (a merge needs the fp32 weights: export).
    ``model.matmul_dtype=auto`` chooses between 'same' and bf16_update, so it is 'same' here."""
    if cfg.model.matmul_dtype == "same" or (cfg.model.matmul_dtype == "bf16" and not full_precision):
        return cfg
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"matmul_dtype": "same"})})


def build_prompt(cfg: Config, policy: Policy, env: TextEnv) -> PromptBuilder:
    return PromptBuilder(
        policy.tokenizer,
        instructions=env.instructions,
        examples=list(env.examples),
        history=cfg.agent.history,
        few_shot=cfg.agent.few_shot,
        think=cfg.agent.think or cfg.agent.context == "reasoning",  # reasoning: think before acting
        tools=getattr(env, "tools", None),
        tool_instructions=getattr(env, "tool_instructions", ""),
        context=ContextSpec(cfg.agent.context, cfg.agent.context_budget, cfg.agent.context_window,
                            cfg.agent.context_call_tokens),
    )


