"""selfevolve: train LLM agents to improve themselves with multi-turn reinforcement learning."""

__version__ = "0.1.0"

from selfevolve.config import Config, load_config  # noqa: E402
from selfevolve.envs import StepResult, TextEnv, make_env  # noqa: E402
from selfevolve.train.trainer import Trainer  # noqa: E402

__all__ = ["Config", "StepResult", "TextEnv", "Trainer", "load_config", "make_env"]
