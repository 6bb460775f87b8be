"""Small helpers of the credit tests (tests/test_attribution.py, tests/test_combinations.py)."""

from __future__ import annotations

import torch


def close(x, expected, tol=1e-9):
    """``x`` equals the hand-computed ``expected`` to ``tol`` (float64)."""
    torch.testing.assert_close(torch.as_tensor(x, dtype=torch.float64),
                               torch.tensor(expected, dtype=torch.float64), atol=tol, rtol=0)


def padded(rows):
    """Ragged per-turn rows as a zero-padded float64 batch and its mask."""
    T = max(len(r) for r in rows)
    x = torch.zeros(len(rows), T, dtype=torch.float64)
    m = torch.zeros(len(rows), T, dtype=torch.bool)
    for i, r in enumerate(rows):
        x[i, :len(r)] = torch.tensor(r, dtype=torch.float64)
        m[i, :len(r)] = True
    return x, m
