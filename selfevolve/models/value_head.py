"""The value head: a small critic on the policy's own body (no second model).

It reads the hidden state that the LoRA-adapted transformer body computes anyway, so a critic costs a few
thousand parameters and no extra forward pass during the update. PPO reads it at the last prompt token of each
turn (the state the action is taken in); Self-AC reads it after a critic prompt. The head can be thrown away
after training: inference cost is unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

VALUE_HEADS = ("linear", "mlp")


class ValueHead(nn.Module):
    """V(h) = w·h + b (``kind="linear"``) or a 2-layer MLP with a tanh hidden layer (``kind="mlp"``).

    The output layer starts at zero, so V ≡ 0 before training: GAE then starts from plain discounted returns
    instead of from the noise of a random head. Computation is in float32 whatever the body's dtype.
    """

    def __init__(self, hidden_size: int, kind: str = "linear"):
        super().__init__()
        if kind not in VALUE_HEADS:
            raise ValueError(f"unknown value head {kind!r}; allowed: {', '.join(VALUE_HEADS)}")
        self.kind = kind
        if kind == "linear":
            self.net = nn.Linear(hidden_size, 1)
            out = self.net
        else:
            self.net = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, 1))
            out = self.net[-1]
        nn.init.zeros_(out.weight)
        nn.init.zeros_(out.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., H] hidden states -> [...] values."""
        return self.net(hidden.float()).squeeze(-1)
