"""TextWorldExpress's games as text environments: ``env.name=twx:<game>`` (``textworld-express`` 1.1.0).

TextWorldExpress simulates its 8 games (coin, cookingworld, twc, arithmetic, mapreader, sorting, simonsays,
peckingorder) in Java; Python talks to it through py4j. What the adapter adds (``docs/environments.md``):

- **One Java process per Python process.** The package's own ``TextWorldExpressEnv`` starts a JVM for every
  instance; the trainer plays dozens of episodes at once, so every environment here gets its own game object
  (``PythonInterface``) in one shared JVM, started on the first ``reset`` and stopped when the last environment
  is closed. Constructing an environment starts nothing. The exception is ``sorting`` (``OWN_JVM``), whose
  generator shares objects between two games of one seed in a JVM: each of its environments has its own.
- **Splits**: ``train`` plays the suite's train fold, ``test`` its test fold, each keeping only the games whose
  content key (the task and the whole map: every room with its objects and exits; for the games without rooms,
  the first observation and the gold path) hashes to its side (``common.py``), so the two never share a game
  even where the folds do.
- **Observations**: the task description, the room and (``show_actions``) the sorted list of valid actions.
  An action that is not in the list is invalid: the error line, the penalty, and the game is not stepped.
- **Success** is the game's ``tasksuccess``; its score (0..1) is ``info["suite_reward"]``; ``taskfailure``
  (e.g. the wrong move in simonsays) ends the episode unsolved.
- **Expert**: the game's gold action sequence, followed from the start (the few-shot examples and the warm
  start). Snapshots replay the episode's moves (a Java game cannot be copied).
"""

from __future__ import annotations

import atexit
import json
import shutil
import threading
from typing import Any, ClassVar

from selfevolve.envs.base import StepResult
from selfevolve.envs.replay import Replay
from selfevolve.envs.suites import INSTALL, Unavailable
from selfevolve.envs.suites.common import SuiteEnv, check_config, expert_turns
from selfevolve.errors import ConfigError
from selfevolve.untrusted import clean_text, too_long

GAMES = ("coin", "cookingworld", "twc", "arithmetic", "mapreader", "sorting", "simonsays", "peckingorder")
JAVA_HINT = "install Java (Debian: apt-get install default-jre-headless; `make setup` does it)"


# ------------------------------------------------------------------------------------------ the Java process
# Games whose generator shares objects between two games of one seed in one JVM: generating the seed again
# (another environment of the same group) takes the objects out of the first game's rooms (sorting's quantities:
# "take 8g of brass" became invalid). Each of their environments gets a JVM of its own.
OWN_JVM = frozenset({"sorting"})


class _JVM:
    """A TextWorldExpress Java process and the game objects in it. ``_JVM.shared`` is the process's one JVM for
    the games that can share one; a game of ``OWN_JVM`` gets a private one."""

    lock = threading.Lock()
    shared: "_JVM | None" = None
    live: "set[_JVM]" = set()  # every JVM running (stopped at exit)

    def __init__(self):
        self.gateway = _launch()
        self.users = 0
        _JVM.live.add(self)

    @classmethod
    def acquire(cls, own: bool = False) -> tuple["_JVM", Any]:
        """``(jvm, game object)``: a new game object in the shared JVM (started if it is not running), or in a
        JVM of its own."""
        with cls.lock:
            if own:
                jvm = cls()
            else:
                if cls.shared is None:
                    cls.shared = cls()
                jvm = cls.shared
            jvm.users += 1
            return jvm, jvm.gateway.jvm.textworldexpress.runtime.PythonInterface()

    def release(self, game) -> None:
        """Forget a game object; the JVM stops with its last one."""
        with _JVM.lock:
            try:
                self.gateway.detach(game)
            except Exception:  # noqa: BLE001 - a JVM that died already holds nothing to forget
                pass
            self.users -= 1
            if self.users <= 0:
                self.stop()

    def stop(self) -> None:
        if _JVM.shared is self:
            _JVM.shared = None
        _JVM.live.discard(self)
        process = self.gateway.java_process
        try:
            self.gateway.shutdown()
        except Exception:  # noqa: BLE001 - shutting down a broken connection: the process is ended below
            pass
        if process is not None and process.poll() is None:
            process.terminate()
            process.wait(timeout=10)

    @classmethod
    def stop_all(cls) -> None:
        for jvm in list(cls.live):
            jvm.stop()


atexit.register(_JVM.stop_all)


def _launch():
    try:
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        from textworld_express.constants import BASEPATH, JAR_PATH
    except ImportError as e:
        raise Unavailable(f"twx games need the package textworld-express ({e}); install the suites: {INSTALL}") from None
    if shutil.which("java") is None:
        raise Unavailable(f"twx games need Java, which is not on this machine: {JAVA_HINT}")
    # die_on_exit: the JVM ends when this process does, even on a crash
    port, process = launch_gateway(classpath=JAR_PATH, die_on_exit=True, cwd=BASEPATH, javaopts=["-Xverify:none"],
                                   return_proc=True)
    return JavaGateway(gateway_parameters=GatewayParameters(auto_field=True, port=port), java_process=process)


def _params_text(config: dict[str, Any]) -> str:
    """TextWorldExpress's game parameters: ``numLocations=3,includeDoors=0``."""
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in sorted(config.items()))


def _normalise(action: str) -> str:
    return " ".join(action.lower().split()).strip(" .!\"'`*")


# ------------------------------------------------------------------------------------------ the environment
class _GoldExamples:
    """``examples``: two turns of the gold path of a training game, made on first use (it needs the JVM) and
    kept per game and parameters. Read on the class, the default parameters; on an instance, its own."""

    def __get__(self, env, cls) -> list[tuple[str, str]]:
        if not cls.game:  # the adapter itself, no game
            return []
        options = {} if env is None else {"config": env.config, "show_actions": env.show_actions}
        probe = cls(split="train", **options)
        key = f"{probe.game}?{probe.params}?{probe.show_actions}"
        if key not in TWXEnv._examples_cache:
            try:
                TWXEnv._examples_cache[key] = expert_turns(probe, probe.reset(0))
            finally:
                probe.close()
        return list(TWXEnv._examples_cache[key])


class TWXEnv(SuiteEnv):
    """A TextWorldExpress game; the class of each ``twx:<game>`` is made by :func:`game_class`.

    Options (besides ``split``, ``max_turns``, ``invalid_penalty`` and ``reward``, see ``common.py``):
        config: the game's parameters (``env.config.numLocations=3``; TextWorldExpress's names).
        show_actions: list the valid actions under every observation.
    """

    suite = "twx"
    reusable = True
    _folds: ClassVar[dict[str, dict[str, list[int]]]] = {}  # params text -> fold -> seeds (read once)
    _examples_cache: ClassVar[dict[str, list[tuple[str, str]]]] = {}

    def __init__(self, split: str = "train", max_turns: int = 15, invalid_penalty: float = 0.1,
                 reward: str = "success", config: dict | None = None, show_actions: bool = True):
        super().__init__(split, max_turns, invalid_penalty, reward)
        self.config = check_config(self.name, config)
        if not isinstance(show_actions, bool):
            raise ConfigError(f"{self.name} option 'show_actions' must be true or false, got {show_actions!r}")
        self.show_actions = show_actions
        self.params = _params_text(self.config)
        self._jvm = self._game = None  # the JVM and the game object in it, made on the first reset
        self._seed = 0
        self._actions: list[str] = []  # the valid actions played since reset (replayed by snapshots)
        self._gold: list[str] = []
        self._content = ""
        self._state: dict[str, Any] = {}
        self._last = ""
        self.done = False

    # ---------------------------------------------------------------- the game in Java
    def _open(self):
        if self._game is None:
            jvm, game = _JVM.acquire(own=self.game in OWN_JVM)
            error = game.load(self.game, self.params)
            if error:
                jvm.release(game)
                raise ConfigError(f"{self.name}: TextWorldExpress refused env.config {self.config!r}: "
                                  f"{str(error).strip()}")
            self._jvm, self._game = jvm, game
        return self._game

    def fold_seeds(self, fold: str) -> list[int]:
        """The suite's seeds of ``fold`` (train, dev or test) for this game and its parameters."""
        key = f"{self.game}?{self.params}"
        if key not in self._folds:
            game = self._open()
            TWXEnv._folds[key] = {"train": list(game.getSeedsTrain()), "dev": list(game.getSeedsDev()),
                                  "test": list(game.getSeedsTest())}
        return self._folds[key][fold]

    def _played_folds(self) -> list[str]:
        """The suite's folds this split draws from (``all``: both)."""
        return ["train", "test"] if self.split == "all" else [self.split]

    def _generate(self, s: int) -> tuple[dict[str, Any], list[str], str]:
        """The game of draw ``s``: the suite's seed ``s mod n`` of the split's fold (``all``: both folds)."""
        game = self._open()
        seeds = [(fold, seed) for fold in self._played_folds() for seed in self.fold_seeds(fold)]
        fold, seed = seeds[s % len(seeds)]
        state = json.loads(game.generateNewGameJSON(seed, fold, True))
        gold = [str(a) for a in game.getGoldActionSequence()]
        task = str(game.getTaskDescription())
        state["taskDescription"] = task
        return state, gold, f"{task}\n{self._world(game) or state['observation'] + chr(10) + ' | '.join(gold)}"

    @staticmethod
    def _world(game) -> str:
        """The whole map of a game with rooms (coin, twc, mapreader, cookingworld): every room's description,
        with its objects and exits. Empty for the games without rooms, whose first observation and gold path
        say everything (coin's gold path would not do: it differs between two generations of one seed)."""
        from py4j.protocol import Py4JError

        try:
            rooms = game.game().locations()
        except Py4JError:
            return ""
        return "\n".join(f"{room.name()}: {room.getDescription()}" for room in rooms)

    def reset(self, seed: int) -> str:
        # the JVM and the folds first: draw() retries a failed generation, not a failed start of Java
        for fold in self._played_folds():
            self.fold_seeds(fold)
        self._state, self._gold, self._content = self.draw(seed, self._generate, lambda item: item[2])
        self._seed, self._actions, self.done = int(seed), [], False
        self._last = f"{self._state['taskDescription']}\n{self._observation()}"
        return self._last

    def _observation(self) -> str:
        text = str(self._state.get("observation", "")).strip()
        if self.show_actions and not self.done:
            text += f"\nValid actions: {', '.join(self.valid_actions() or [])}"
        return text

    def step(self, action: str) -> StepResult:
        if self._game is None or not self._state:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            return StepResult(self._last, 0.0, True, self._info(True))
        choice = _normalise(clean_text(action)) if isinstance(action, str) and not too_long(action) else ""
        if choice not in set(self.valid_actions() or []):
            shown = (choice[:60] + "...") if len(choice) > 60 else choice
            text = f"Invalid action {shown!r}: answer with one of the valid actions.\n{self._observation()}"
            return StepResult(text, -self.invalid_penalty, False, self._info(False))
        before = float(self._state.get("score", 0.0))
        self._state = json.loads(self._game.stepJSON(choice))
        self._actions.append(choice)
        score = float(self._state.get("score", 0.0))
        self.done = bool(self._state.get("tasksuccess") or self._state.get("taskfailure") or score >= 1.0)
        self._last = self._observation()
        return StepResult(self._last, self.reward(self.success, score - before, True), self.done, self._info(True))

    def _info(self, valid: bool) -> dict[str, Any]:
        return {"success": self.success, "valid_action": valid, "suite_reward": float(self._state.get("score", 0.0))}

    @property
    def success(self) -> bool:
        return bool(self._state.get("tasksuccess"))

    # ---------------------------------------------------------------- what the trainer reads
    def render(self) -> str:
        return self._last

    def content_key(self) -> str:
        return self._content

    def state_key(self) -> str:
        s = self._state
        return f"{s.get('observation', '')}|{s.get('inventory', '')}|{s.get('score', 0)}" + (",done" if self.done else "")

    def valid_actions(self) -> list[str] | None:
        return sorted(str(a) for a in self._state.get("validActions", [])) if self._state else None

    def progress(self) -> float:
        return 1.0 if self.success else max(0.0, min(1.0, float(self._state.get("score", 0.0))))

    def has_expert(self) -> bool:
        return True

    def expert_action(self) -> str | None:
        """The next move of the gold path while the episode has followed it; None once it left it."""
        if self.done or self._actions != self._gold[:len(self._actions)] or len(self._actions) >= len(self._gold):
            return None
        return self._gold[len(self._actions)]

    def snapshot(self) -> Replay:
        return Replay(self._seed, tuple(self._actions))

    def restore(self, snapshot: Replay) -> None:
        self.reset(snapshot.seed)
        for action in snapshot.actions:
            self.step(action)

    def close(self) -> None:
        if self._game is not None:
            jvm, game, self._jvm, self._game = self._jvm, self._game, None, None
            jvm.release(game)

    examples = _GoldExamples()  # type: ignore[assignment]


def game_class(game: str) -> type[TWXEnv]:
    """The environment class of ``twx:<game>``; Unavailable without the package or Java (checked without
    starting either)."""
    game = game.lower()
    if game not in GAMES:
        raise ConfigError(f"unknown TextWorldExpress game {game!r}; games: {', '.join(GAMES)}")
    try:
        import py4j  # noqa: F401
        import textworld_express  # noqa: F401
    except ImportError as e:
        raise Unavailable(f"env 'twx:{game}' needs the package textworld-express ({e}); install the suites: "
                          f"{INSTALL}") from None
    if shutil.which("java") is None:
        raise Unavailable(f"env 'twx:{game}' needs Java, which is not on this machine: {JAVA_HINT}")
    name = f"twx:{game}"
    instructions = (f"TextWorldExpress {game}: a text adventure. Reach the goal the task names. Answer with one "
                    f"action, written exactly as in the list of valid actions.")
    return type(name, (TWXEnv,), {"name": name, "game": game, "instructions": instructions})


ADAPTER = TWXEnv  # what selfevolve.envs.suites.adapters() lists
