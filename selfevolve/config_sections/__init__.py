"""The configuration's sections: one pydantic model per section, each field with its default and a description
(shown by ``selfevolve train --help``). The root :class:`~selfevolve.config.Config`, its cross-section checks
and the loading of YAML files and overrides are in :mod:`selfevolve.config`.

By what they configure: the model and how it acts (``agent.py``), what a step learns from (``learning.py``), the
self-evolving mechanisms (``evolving.py``), the run (``run.py``); what every section is (``base.py``).
"""

from selfevolve.config_sections.agent import (
    AgentConfig,
    EnvConfig,
    LoraConfig,
    ModelConfig,
    RolloutConfig,
    SearchConfig,
)
from selfevolve.config_sections.evolving import EvolveConfig, ExperienceConfig, LlmApiConfig, QuestioningConfig
from selfevolve.config_sections.learning import (
    AlgoConfig,
    AttributionConfig,
    FilterConfig,
    GigpoConfig,
    PpoConfig,
    RewardConfig,
    SamplingConfig,
    SelaurConfig,
    SelfAcConfig,
)
from selfevolve.config_sections.run import DistributedConfig, EvalConfig, TrainConfig

__all__ = ["AgentConfig", "AlgoConfig", "AttributionConfig", "DistributedConfig", "EnvConfig", "EvalConfig",
           "EvolveConfig", "ExperienceConfig", "FilterConfig", "GigpoConfig", "LlmApiConfig", "LoraConfig",
           "ModelConfig", "PpoConfig", "QuestioningConfig", "RewardConfig", "RolloutConfig", "SamplingConfig",
           "SearchConfig", "SelaurConfig", "SelfAcConfig", "TrainConfig"]
