"""Objectives: what the update learns from a step's trajectories — credit (rewards -> filter -> advantages ->
training rows) and the optimizer steps on them."""
