"""Experience the agent reuses (docs/experience.md).

- :mod:`~selfevolve.experience.pool`: one SQLite file per run holding trajectories and distilled insights,
  their embeddings, intents and tool sequences — part of the run's state (resume drops later rows);
- :mod:`~selfevolve.experience.embed`: sentence embeddings (all-MiniLM-L6-v2, offline);
- :mod:`~selfevolve.experience.recall`: SEER, stepwise experience recall;
- :mod:`~selfevolve.experience.navigation`: AgentEvolver's self-navigating (insights, η split, stripping,
  selective boosting);
- :mod:`~selfevolve.experience.intent`: an LLM classifies a request into the environment's intents;
- :mod:`~selfevolve.experience.guide`: what the trainer and the rollout call.

Importing this package is light; the embedding model loads on first use.
"""
