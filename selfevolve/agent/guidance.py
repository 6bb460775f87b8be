"""What the experience pool adds to one episode's prompt: recalled few-shot episodes and an insight block."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Guidance:
    """What the experience pool adds to one episode's prompt (``selfevolve/experience/``).

    ``episodes``: few-shot episodes, each a list of (observation, action) turns, shown instead of the
    environment's static examples (SEER recall); None keeps the static ones. ``block``: text added to the
    system prompt (self-navigating's insights); the training sample is built without it (stripping).
    ``strip_examples``: the training sample is also built without the recalled episodes, with the static examples
    (``experience.train_prompt=stripped``)."""

    episodes: tuple | None = None
    block: str = ""
    strip_examples: bool = False


NO_GUIDANCE = Guidance()
