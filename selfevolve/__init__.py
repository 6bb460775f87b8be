"""selfevolve: train LLM agents to improve themselves with multi-turn reinforcement learning."""

import importlib

__version__ = "0.1.0"

# The public names, imported on first use (PEP 562): the trainer brings torch and transformers (seconds), the
# config and the environments pydantic and gymnasium, and none of it is needed for `selfevolve --help`.
_HOMES = {"Config": "selfevolve.config", "load_config": "selfevolve.config", "StepResult": "selfevolve.envs",
          "TextEnv": "selfevolve.envs", "make_env": "selfevolve.envs", "Trainer": "selfevolve.train.trainer"}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'selfevolve' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
