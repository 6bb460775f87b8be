"""``selfevolve evolve``: rounds of exploring, writing verified hindsight tasks, imitation and RL on them, and
held-out evaluation (``loop.py``; docs/evolve.md)."""

from selfevolve.evolve.loop import Evolver

__all__ = ["Evolver"]
