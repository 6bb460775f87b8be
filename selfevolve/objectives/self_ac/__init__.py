"""Self-AC (seed 001): actor and critic of a whole episode from one forward pass of its shadow prompt."""
