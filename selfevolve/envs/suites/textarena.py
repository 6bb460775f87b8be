"""TextArena's single-player games as text environments: ``env.name=textarena:<EnvId>`` (``textarena`` 0.7.4).

What the adapter adds to a TextArena game (``docs/environments.md``, "TextArena"):

- **Observations** are the game's own messages since the last move (its rules and board first), without the
  echo of the player's move; the reason the game gives when it ends closes the last one.
- **Seeds.** TextArena seeds Python's *global* ``random`` in ``reset`` and some games draw from it while they run.
  Every call into the game runs with the episode's own random state swapped in and the caller's restored after,
  so episodes played side by side stay reproducible and the trainer's random stream is untouched.
- **Splits** are content-disjoint by the game's hidden state just after ``reset`` (the map, the secret number:
  ``content_key``); ``envs/suites/common.py``. TowerOfHanoi starts the same position from every seed: it has no
  held-out split and is played with ``split=all``.
- **Success** is the game's final reward of exactly 1 (a win); TextArena's shaped reward (the share of the way
  to the goal, on a loss too) is ``info["suite_reward"]``, and the reward with ``reward=suite``.
- **Invalid moves** keep TextArena's rule: ``error_allowance`` invalid moves in a row are forgiven with a
  message (TextArena's default 1), the next ends the game. Each invalid move has ``valid_action=False`` and the
  penalty.
- **Experts** where the game has one written here (``textarena_experts.py``): TowerOfHanoi, FrozenLake and
  GuessTheNumber. They give the few-shot examples and the warm start.

A game that cannot run here is refused by name when the name is resolved: word games that need NLTK data (a
download), games for two or more players, games that do not import on this Python.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import random
import sys
from typing import Any, ClassVar

from selfevolve.envs.base import StepResult
from selfevolve.envs.replay import Replay
from selfevolve.envs.suites import INSTALL, Unavailable
from selfevolve.envs.suites.common import SuiteEnv, check_config, check_int, expert_turns
from selfevolve.envs.suites.textarena_experts import EXPERTS, VALID
from selfevolve.errors import ConfigError
from selfevolve.untrusted import clean_text, too_long


def _textarena(who: str = "textarena games need"):
    try:
        import textarena
    except ImportError as e:
        raise Unavailable(f"{who} the package textarena ({e}); install the suites: {INSTALL}") from None
    return textarena


@contextlib.contextmanager
def _own_random(state):
    """Run with ``state`` as the global ``random`` state (None: leave it as it is), give back the state the
    block left (``box[0]``) and restore the caller's."""
    outer = random.getstate()
    if state is not None:
        random.setstate(state)
    box = [None]
    try:
        yield box
    finally:
        box[0] = random.getstate()
        random.setstate(outer)


def _message_text(messages, with_prompt: bool = True) -> str:
    """The game's messages as one observation: everything but the echo of the player's own move."""
    ta = _textarena()
    skip = {ta.ObservationType.PLAYER_ACTION} | (set() if with_prompt else {ta.ObservationType.PROMPT})
    return "\n".join(str(m).strip() for _, m, kind in messages if kind not in skip and str(m).strip())


def _plain(value: Any) -> Any:
    """What ``json.dumps`` cannot write, as plain data: an object as its class name and attributes (its repr
    would hold its address, which differs between two games of one seed), a set sorted."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if hasattr(value, "__dict__"):
        return {"__class__": type(value).__name__, **vars(value)}
    slots = [name for cls in type(value).__mro__ for name in getattr(cls, "__slots__", ())]
    if slots:
        return {"__class__": type(value).__name__, **{name: getattr(value, name, None) for name in slots}}
    return repr(value)


def _state_text(state: Any) -> str:
    """A game state as text: the same for two games of one seed (content and state keys)."""
    return json.dumps(state, sort_keys=True, default=_plain)


class TextArenaEnv(SuiteEnv):
    """A TextArena single-player game; the class of each ``textarena:<EnvId>`` is made by :func:`game_class`.

    Options (besides ``split``, ``max_turns``, ``invalid_penalty`` and ``reward``, see ``common.py``):
        error_allowance: invalid moves in a row the game forgives before it ends (TextArena's rule, default 1).
        config: the game's own constructor settings over the registered ones (``env.config.num_holes=2``).
    """

    suite = "textarena"
    env_id: ClassVar[str] = ""
    entry: ClassVar[str] = ""  # "module:Class" of the game
    defaults: ClassVar[dict[str, Any]] = {}  # the registered constructor settings of env_id
    game_type: ClassVar[str] = ""  # the game's class name (which expert / valid-move list applies)

    def __init__(self, split: str = "train", max_turns: int = 12, invalid_penalty: float = 0.1,
                 reward: str = "success", error_allowance: int = 1, config: dict | None = None):
        super().__init__(split, max_turns, invalid_penalty, reward)
        self.error_allowance = check_int(self.name, "error_allowance", error_allowance, 0)
        self.config = check_config(self.name, config)
        self._game = None
        self._rng = None
        self._content = ""
        self._last = self._board = ""
        self.done = False
        if self.config:  # the few-shot examples of these settings (a range of 1..100 shows its own first guess)
            key = (self.name, _state_text(self.config))
            if key not in _CONFIG_EXAMPLES:
                _CONFIG_EXAMPLES[key] = []  # the examples' own environment has these settings: no recursion
                try:
                    _CONFIG_EXAMPLES[key] = _examples(type(self), self.config)
                except BaseException:  # interrupted: no empty entry left behind for later environments
                    _CONFIG_EXAMPLES.pop(key, None)
                    raise
            self.examples = _CONFIG_EXAMPLES[key]

    # ---------------------------------------------------------------- the game
    def _new_game(self):
        module, _, cls_name = self.entry.partition(":")
        cls = getattr(importlib.import_module(module), cls_name)
        try:
            return cls(**{**self.defaults, **self.config})
        except TypeError as e:
            raise ConfigError(f"{self.name}: bad env.config {self.config!r}: {e}") from None

    def _call(self, fn, *args, **kwargs):
        """``fn`` run with this episode's random state, its prints (some games print their generator's
        retries) kept off the command's output."""
        with _own_random(self._rng) as box, contextlib.redirect_stdout(io.StringIO()):
            out = fn(*args, **kwargs)
        self._rng = box[0]
        return out

    def reset(self, seed: int) -> str:
        if self._game is None:
            self._game = self._new_game()

        def start(s: int):
            self._rng = None  # reset seeds the global random itself (TextArena's State)
            self._call(self._game.reset, num_players=1, seed=s)
            return _state_text(self._game.state.game_state)

        self._content = self.draw(seed, start, lambda content: content)
        self._game.state.error_allowance = self.error_allowance
        self.done = False
        _, messages = self._game.get_observation()
        self._last = _message_text(messages)
        self._board = _message_text(messages, with_prompt=False)  # the first observation without the rules
        return self._last

    def step(self, action: str) -> StepResult:
        if self._game is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            return StepResult(self._last, 0.0, True, self._info(True))
        if not isinstance(action, str) or too_long(action):
            return StepResult(f"Invalid move: the reply is not a move.\n{self._last}", -self.invalid_penalty, False,
                              self._info(False))
        done, _ = self._call(self._game.step, clean_text(action))
        state = self._game.state
        valid = not (state.error_count > 0 or state.game_info[0].get("invalid_move"))
        _, messages = self._game.get_observation()
        text = _message_text(messages)
        self.done = bool(done)
        suite_reward = 0.0
        if self.done:
            suite_reward = float((state.rewards or {}).get(0, 0.0))
            reason = state.game_info[0].get("reason")
            text = f"{text}\nGame over: {reason}" if reason and str(reason) not in text else text
        self._last = text
        success = self.done and suite_reward >= 1.0
        return StepResult(text, self.reward(success, suite_reward, valid), self.done,
                          self._info(valid, suite_reward if self.done else None))

    def _info(self, valid: bool, suite_reward: float | None = None) -> dict[str, Any]:
        info: dict[str, Any] = {"success": self.success, "valid_action": valid}
        if suite_reward is not None:
            info["suite_reward"] = suite_reward
        return info

    @property
    def success(self) -> bool:
        state = getattr(self._game, "state", None)
        return bool(self.done and state is not None and float((state.rewards or {}).get(0, 0.0)) >= 1.0)

    # ---------------------------------------------------------------- what the trainer reads
    def render(self) -> str:
        return self._last

    def content_key(self) -> str:
        return self._content

    def state_key(self) -> str:
        if self._game is None:
            return ""
        return _state_text(self._game.state.game_state) + (",done" if self.done else "")

    def progress(self) -> float:
        if self._game is None:
            return 0.0
        if self.success:
            return 1.0
        completion = getattr(self._game, "_get_percentage_completion", None)
        try:
            return max(0.0, min(1.0, float(completion()))) if callable(completion) else 0.0
        except Exception:  # noqa: BLE001 - a heuristic of someone else's game: never worth a crash
            return 0.0

    def has_expert(self) -> bool:
        return self.game_type in EXPERTS

    def expert_action(self) -> str | None:
        if self._game is None or self.done or self.game_type not in EXPERTS:
            return None
        return EXPERTS[self.game_type](self._game)

    def valid_actions(self) -> list[str] | None:
        if self._game is None or self.game_type not in VALID:
            return None
        return VALID[self.game_type](self._game)

    def snapshot(self) -> Any:
        return copy.deepcopy((self._game, self._rng, self._content, self._last, self.done))

    def restore(self, snapshot: Any) -> None:
        if isinstance(snapshot, Replay):
            raise TypeError("a TextArena game restores from its own snapshots")
        self._game, self._rng, self._content, self._last, self.done = copy.deepcopy(snapshot)


# ---------------------------------------------------------------------------------------------------- classes
def _refusal(env_id: str, error: BaseException) -> str:
    """Why a game cannot run here, in one sentence."""
    text = str(error).strip().splitlines()
    first = next((line.strip(" *") for line in text if line.strip(" *")), type(error).__name__)
    if isinstance(error, LookupError):
        return (f"needs NLTK data that is not on this machine (TextArena downloads it with nltk.download, which "
                f"failed: {first}); word games do not run offline")
    if isinstance(error, SyntaxError):
        return f"does not import on Python {sys.version_info.major}.{sys.version_info.minor} ({error.msg})"
    if isinstance(error, AssertionError) or "player" in first.lower():
        return f"is not a single-player game ({first}); only single-player games are adapted"
    return f"does not start ({type(error).__name__}: {first})"


def game_class(env_id: str) -> type[TextArenaEnv]:
    """The environment class of ``textarena:<env_id>``; Unavailable when the game does not run here (checked by
    starting it once, quietly)."""
    ta = _textarena(f"env 'textarena:{env_id}' needs")
    from textarena.envs.registration import ENV_REGISTRY

    spec = ENV_REGISTRY.get(env_id)
    if spec is None or not isinstance(spec.entry_point, str):
        import difflib

        near = difflib.get_close_matches(env_id, [k for k in ENV_REGISTRY if not k.endswith(("-raw", "-train"))], 3)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise ConfigError(f"unknown TextArena env id {env_id!r}{hint}")
    name = f"textarena:{env_id}"
    cls = type(name, (TextArenaEnv,), {"name": name, "game": env_id, "env_id": env_id, "entry": spec.entry_point,
                                       "defaults": dict(spec.kwargs),
                                       "game_type": spec.entry_point.rpartition(":")[2]})
    probe = cls(split="all")
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            game = probe._new_game()
            probe._call(game.reset, num_players=1, seed=0)
            if not isinstance(game.state, ta.SinglePlayerState):
                raise AssertionError(f"its state is a {type(game.state).__name__}")
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of someone else's game (SyntaxError too) is a refusal
        raise Unavailable(f"env {name!r} {_refusal(env_id, e)}") from None
    cls.instructions = (f"You are playing TextArena's {env_id}. The game's rules and board come in the first "
                        f"message. Answer with one move, written as the rules ask.")
    cls.examples = _examples(cls)
    return cls


_CONFIG_EXAMPLES: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (env name, env.config): examples


def _examples(cls: type[TextArenaEnv], config: dict | None = None) -> list[tuple[str, str]]:
    """Two turns of the expert on a training game, or none: the first of seeds 0..7 whose game lasts two turns (a
    guessing game can be won by its first guess), else the longest. The first observation is the game's board,
    its rules left out as every episode shows them (a game without a board, such as GuessTheNumber, shows its
    rules). A game with a single instance (no training split) shows that one. ``config``: the game's settings
    (``env.config``) over the registered ones."""
    if cls.game_type not in EXPERTS:
        return []
    best: list[tuple[str, str]] = []
    try:
        try:
            env = cls(split="train", config=config)
            env.reset(0)
        except ConfigError:
            env = cls(split="all", config=config)
        for seed in range(8):
            env.reset(seed)
            out = expert_turns(env, env._board or env.render())
            best = out if len(out) > len(best) else best
            if len(best) == 2:
                break
    except (ConfigError, Exception):  # noqa: BLE001 - examples are a help; a game without them still plays
        return []
    return best


ADAPTER = TextArenaEnv  # what selfevolve.envs.suites.adapters() lists
