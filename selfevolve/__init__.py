"""selfevolve: train LLM agents to improve themselves with multi-turn reinforcement learning."""

__version__ = "0.1.0"

from selfevolve.config import Config, load_config  # noqa: E402
from selfevolve.envs import StepResult, TextEnv, make_env  # noqa: E402

__all__ = ["Config", "StepResult", "TextEnv", "Trainer", "load_config", "make_env"]


def __getattr__(name: str):
    # The trainer imports torch and transformers (seconds): loaded on first use, so that `selfevolve --help`
    # and light imports (the config, the viewer) stay fast (PEP 562).
    if name == "Trainer":
        from selfevolve.train.trainer import Trainer

        return Trainer
    raise AttributeError(f"module 'selfevolve' has no attribute {name!r}")
