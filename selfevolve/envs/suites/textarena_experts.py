"""Experts and valid-move lists for TextArena games, read from the game's own state (``env.state.game_state``).

TextArena ships no solvers; these are written from the games' rules (facts, not code, carry over):

- TowerOfHanoi: the optimal next move from any legal position. To put disks ``n..1`` on peg ``t``: if disk ``n``
  is already on ``t``, put ``n-1..1`` on ``t``; else first put ``n-1..1`` on the third peg, then move ``n``.
  The first move this recursion makes is the optimal one (the classic minimal solution, 2^n - 1 moves from
  the start).
- FrozenLake: the first move of a shortest hole-free path to the goal (breadth-first search on the grid).
- GuessTheNumber: binary search on the hints the game gave ("higher", "lower"), never on the secret: the middle
  of the range the hints leave, rounded down. It wins within ceil(log2(n + 1)) guesses on n numbers (7 on 1..100).

Keys are the games' class names; values take the raw TextArena environment.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

_STEPS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def hanoi_move(towers: dict[str, list[int]], n: int | None = None, target: str = "C") -> tuple[str, str] | None:
    """The optimal next move ``(source, target)`` towards all disks on ``target``; None when they are there.
    ``towers`` maps peg names to disks bottom first (TextArena's ``{"A": [3, 2, 1], "B": [], "C": []}``)."""
    where = {disk: peg for peg, disks in towers.items() for disk in disks}
    if n is None:
        n = len(where)
    while n > 0:
        peg = where[n]
        if peg == target:
            n -= 1
            continue
        third = next(p for p in towers if p not in (peg, target))
        return hanoi_move(towers, n - 1, third) or (peg, target)
    return None


def _hanoi_expert(env) -> str | None:
    move = hanoi_move(env.state.game_state["towers"])
    return None if move is None else f"[{move[0]} {move[1]}]"


def _hanoi_valid(env) -> list[str]:
    towers = env.state.game_state["towers"]
    return [f"[{a} {b}]" for a in towers for b in towers
            if a != b and towers[a] and (not towers[b] or towers[b][-1] > towers[a][-1])]


def frozenlake_path(grid: list[list[str]], start: tuple[int, int]) -> list[str] | None:
    """The moves of a shortest path from ``start`` to the ``G`` cell avoiding holes ``H``; None if none."""
    rows, cols = len(grid), len(grid[0])
    first: dict[tuple[int, int], list[str]] = {tuple(start): []}
    queue = deque([tuple(start)])
    while queue:
        r, c = queue.popleft()
        if grid[r][c] == "G":
            return first[(r, c)]
        for name, (dr, dc) in _STEPS.items():
            nxt = (r + dr, c + dc)
            if 0 <= nxt[0] < rows and 0 <= nxt[1] < cols and nxt not in first and grid[nxt[0]][nxt[1]] != "H":
                first[nxt] = first[(r, c)] + [name]
                queue.append(nxt)
    return None


def _frozenlake_expert(env) -> str | None:
    gs = env.state.game_state
    path = frozenlake_path(gs["grid"], gs["player_pos"])
    return f"[{path[0]}]" if path else None


def _frozenlake_valid(env) -> list[str]:
    """The moves that stay on the grid (TextArena counts a move into the edge as an invalid move)."""
    gs = env.state.game_state
    size = len(gs["grid"])
    r, c = gs["player_pos"]
    return [f"[{name}]" for name, (dr, dc) in _STEPS.items() if 0 <= r + dr < size and 0 <= c + dc < size]


def guess_range(low: int, high: int, history: list[tuple[int, str]]) -> tuple[int, int]:
    """The numbers ``low..high`` that the hints of ``history`` (``(guess, "higher" | "lower")``) still allow."""
    for guess, hint in history:
        if hint == "higher":
            low = max(low, guess + 1)
        else:
            high = min(high, guess - 1)
    return low, high


def _guess_expert(env) -> str | None:
    low, high = guess_range(env.min_number, env.max_number, env.state.game_state.get("guess_history", []))
    return f"[{(low + high) // 2}]" if low <= high else None


def _guess_valid(env) -> list[str]:
    guessed = {g for g, _ in env.state.game_state.get("guess_history", [])}
    return [f"[{n}]" for n in range(env.min_number, env.max_number + 1) if n not in guessed]


EXPERTS: dict[str, Callable[[Any], str | None]] = {
    "TowerOfHanoiEnv": _hanoi_expert,
    "FrozenLakeEnv": _frozenlake_expert,
    "GuessTheNumberEnv": _guess_expert,
}
VALID: dict[str, Callable[[Any], list[str]]] = {
    "TowerOfHanoiEnv": _hanoi_valid,
    "FrozenLakeEnv": _frozenlake_valid,
    "GuessTheNumberEnv": _guess_valid,
}
