"""What the suites' adapters share: the options every one has, content-disjoint splits, and the project's
meaning of reward, success and invalid moves.

**Splits.** ``split="train"`` plays only content whose key (``TextEnv.content_key``: the map, the hidden number,
the question) hashes into the training share, ``split="test"`` only content that hashes into the held-out share
(``envs/holdout.py``): a seed whose content falls on the wrong side is redrawn, deterministically. Train and test
therefore never share a task, however long a run trains; a suite with folds of its own (TextWorldExpress) draws
from its train or test fold *and* checks the key. ``split="all"`` plays every seed's own content (no held-out
set: for games with a single instance, such as TowerOfHanoi). A generation that raises is skipped like content on
the wrong side (reasoning-gym's maze fails on some items); several for one seed stop the run with the error.

**Rewards.** ``reward="success"`` (the default): 1 when the suite says the game is won, 0 otherwise, minus
``invalid_penalty`` for an invalid move. ``reward="suite"``: the suite's own reward (TextArena's shaped final
reward, TextWorldExpress's score increase, reasoning-gym's score), minus the same penalty. Either way the
suite's own figure is kept in ``info["suite_reward"]`` beside the project's.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, ClassVar, TypeVar

from selfevolve.envs.base import TextEnv
from selfevolve.envs.holdout import bucket, redraw_seed
from selfevolve.errors import ConfigError, SelfEvolveError, bounded

SPLITS = ("train", "test", "all")
REWARDS = ("success", "suite")
MAX_DRAWS = 1000  # redraws before a split is declared empty
FAILED_DRAWS = 8  # failed generations of one seed that declare the game broken
SAME_CONTENT = 32  # this many draws with one content: the game has a single instance

T = TypeVar("T")
log = logging.getLogger(__name__)


def check_int(env: str, option: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{env} option {option!r} must be an integer >= {low}, got {value!r}")
    return value


def check_number(env: str, option: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{env} option {option!r} must be a number, got {value!r}")
    return float(value)


def check_choice(env: str, option: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{env} option {option!r} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def check_config(env: str, value: Any) -> dict[str, Any]:
    """The ``config`` option: the suite's own settings of the game, a mapping of names to plain values."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{env} option 'config' must be a mapping of the game's settings (e.g. "
                          f"env.config.num_holes=2), got {value!r}")
    return dict(value)


def draw_content(name: str, split: str, seed: int, make: Callable[[int], T], key: Callable[[T], str]) -> T:
    """``make(s)`` for the first of ``seed``'s redraws (``holdout.redraw_seed``) whose content key lies in the
    ``split``'s share; ``split="all"``: the seed's own draw (or, if that generation raises, the next one).
    ConfigError when the split has no content (a game with a single instance has only one side).

    A generation that raises is skipped like content on the wrong side: suites' generators fail on some items
    (reasoning-gym's maze raised "Could not find suitable path cell" for training seed 261), and one such seed
    must not end a run. ``FAILED_DRAWS`` failures for one seed mean the game itself is broken: an error naming
    it and the last failure. The project's own errors (a refused setting) are raised at once."""
    keys: set[str] = set()
    failures: list[str] = []
    for k in range(MAX_DRAWS):
        try:
            item = make(redraw_seed(seed, k))
        except SelfEvolveError:
            raise
        except Exception as e:  # noqa: BLE001 - the suite's generator (or its adapter) failing on this item
            failures.append(bounded(f"{type(e).__name__}: {' '.join(str(e).split())}", 300))
            log.warning("%s: generation %d of seed %d failed (%s); drawing the next", name, k, seed, failures[-1])
            if len(failures) >= FAILED_DRAWS:
                raise SelfEvolveError(f"{name}: generation failed {len(failures)} times for seed {seed} (the suite "
                                      f"or its adapter; last: {failures[-1]})") from e
            continue
        if split == "all":
            return item
        content = key(item)
        if bucket(content) == split:
            return item
        keys.add(content)
        if len(keys) == 1 and k + 1 - len(failures) == SAME_CONTENT:
            raise ConfigError(f"{name}: every seed starts the same game, so it has no held-out {split} split; "
                              f"play it with env.split=all (and eval.env.split=all), which evaluates on the game "
                              f"it trains on")
    raise ConfigError(f"{name}: no {split} content in {MAX_DRAWS} draws ({len(keys)} distinct contents, all on "
                      f"the other side); widen the game's settings (env.config)")


class SuiteEnv(TextEnv):
    """The options and the reward mapping every suite adapter shares; subclasses set ``suite`` and ``game``."""

    suite: ClassVar[str] = ""
    game: ClassVar[str] = ""

    def __init__(self, split: str = "train", max_turns: int = 12, invalid_penalty: float = 0.1,
                 reward: str = "success"):
        self.split = check_choice(self.name, "split", split, SPLITS)
        self.max_turns = check_int(self.name, "max_turns", max_turns, 1)
        self.invalid_penalty = check_number(self.name, "invalid_penalty", invalid_penalty)
        self.reward_mode = check_choice(self.name, "reward", reward, REWARDS)

    def draw(self, seed: int, make: Callable[[int], T], key: Callable[[T], str]) -> T:
        return draw_content(self.name, self.split, int(seed), make, key)

    def reward(self, success: bool, suite_reward: float, valid: bool) -> float:
        """The project's reward of a step (see the module docstring)."""
        base = float(suite_reward) if self.reward_mode == "suite" else (1.0 if success else 0.0)
        return base - (0.0 if valid else self.invalid_penalty)


def expert_turns(env: TextEnv, observation: str, turns: int = 2) -> list[tuple[str, str]]:
    """The expert's first ``turns`` (observation, move) pairs from ``observation``, the game ``env`` was just
    reset to (the few-shot examples); fewer when the expert has no move or the game ends."""
    out: list[tuple[str, str]] = []
    for _ in range(turns):
        action = env.expert_action()
        if action is None:
            break
        out.append((observation, action))
        result = env.step(action)
        if result.done:
            break
        observation = result.observation
    return out
