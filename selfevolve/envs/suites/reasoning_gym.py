"""reasoning-gym's puzzles as text environments: ``env.name=rg:<dataset>`` (``reasoning-gym`` 0.1.25).

A reasoning-gym dataset generates questions with a reference answer and a scorer (``score_answer``, 0..1) from
a seed. What the adapter adds (``docs/environments.md``, "reasoning-gym"):

- **Episodes**: the question is the first observation; the reply is the answer. With ``retries=N`` a wrong
  answer is answered with the scorer's verdict and the episode goes on, up to N more answers: a single-turn
  puzzle becomes a multi-turn problem (``max_turns`` is ``1 + retries``).
- **Seeds**: item ``s`` of one dataset made with the suite's config (``env.config.*``, the dataset's own
  names, e.g. ``env.config.max_grid_size=6``) and its seed 0; the split redraws ``s`` until the question's
  hash is on its side (``common.py``), so train and test never share a question.
- **Success** is a score of 1; the score itself is ``info["suite_reward"]`` (and the reward with
  ``reward=suite``). An empty reply is an invalid answer (the penalty; it uses up a try).
- **Expert**: the reference answer (few-shot example and warm start), where the scorer gives it 1: some
  datasets accept many answers and keep a placeholder (boxnet, graph_color, propositional_logic, rubiks_cube,
  rush_hour), and have neither expert nor example.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any, ClassVar

from selfevolve.envs.base import StepResult
from selfevolve.envs.suites import INSTALL, Unavailable
from selfevolve.envs.suites.common import SuiteEnv, check_config, check_int
from selfevolve.errors import ConfigError
from selfevolve.untrusted import clean_text, too_long

SIZE = 2**31  # the dataset's virtual size: item indices are seeds modulo this
# Datasets whose answers lie in a range their config sets (the random valid policy draws from it)
ANSWER_SPACES = {"maze": lambda c: [str(d) for d in range(c.min_dist, c.max_dist + 1)]}


def _factory(who: str = "rg datasets need"):
    try:
        from reasoning_gym import factory
    except ImportError as e:
        raise Unavailable(f"{who} the package reasoning-gym ({e}); install the suites: {INSTALL}") from None
    return factory


@lru_cache(maxsize=32)
def _dataset(name: str, config_items: tuple):
    """One dataset per name and config in a process (some load word lists when made)."""
    return _factory().create_dataset(name, seed=0, size=SIZE, **dict(config_items))


class ReasoningGymEnv(SuiteEnv):
    """A reasoning-gym dataset; the class of each ``rg:<dataset>`` is made by :func:`game_class`.

    Options (besides ``split``, ``invalid_penalty`` and ``reward``, see ``common.py``):
        retries: wrong answers after which the episode goes on with the scorer's verdict (0: one answer).
        config: the dataset's own settings (``env.config.max_grid_size=6``).
    """

    suite = "rg"
    gold_scores: ClassVar[bool] = False  # the dataset's reference answers score 1 (checked on an example)

    def __init__(self, split: str = "train", invalid_penalty: float = 0.1, reward: str = "success",
                 retries: int = 0, config: dict | None = None):
        self.retries = check_int(self.name if self.game else "rg", "retries", retries, 0)
        super().__init__(split, 1 + self.retries, invalid_penalty, reward)
        self.config = check_config(self.name, config)
        if self.retries:
            self.instructions = (f"{self.instructions} After a wrong answer you are told its score and may answer "
                                 f"again, up to {self.retries} more {'time' if self.retries == 1 else 'times'}.")
        if self.game:
            _, config_cls = _factory().DATASETS[self.game]
            try:
                settings = config_cls(**{**self.config, "seed": 0, "size": SIZE})
                if hasattr(settings, "validate"):
                    settings.validate()
            except (TypeError, ValueError, AssertionError) as e:
                what = f"bad env.config {self.config!r}" if self.config else "the dataset refuses its default settings"
                raise ConfigError(f"{self.name}: {what}: {e}") from None
        self._entry: dict[str, Any] | None = None
        self._attempts = 0
        self._score = 0.0
        self._last = ""
        self._gold_ok = False
        self.done = False

    def _items(self):
        return _dataset(self.game, tuple(sorted(self.config.items())))

    def reset(self, seed: int) -> str:
        dataset = self._items()
        self._entry = self.draw(seed, lambda s: dataset[s % SIZE], lambda entry: str(entry["question"]))
        self._attempts, self._score, self.done = 0, 0.0, False
        # a reference answer is an expert only where the scorer takes it (some datasets accept many answers and
        # store a placeholder: boxnet, graph_color, rush_hour, ...)
        self._gold_ok = self._scored(str(self._entry["answer"])) >= 1.0
        self._last = str(self._entry["question"])
        return self._last

    def step(self, action: str) -> StepResult:
        if self._entry is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            return StepResult(self._last, 0.0, True, self._info(True))
        answer = clean_text(action).strip() if isinstance(action, str) and not too_long(action) else ""
        valid = bool(answer)
        self._score = self._scored(answer) if valid else 0.0
        self._attempts += 1
        self.done = self.success or self._attempts > self.retries
        if self.success:
            text = "Correct."
        elif self.done:
            text = f"Wrong: your answer scored {self._score:g} of 1. No tries left."
        else:
            left = self.retries + 1 - self._attempts
            what = "an empty answer" if not valid else f"your answer scored {self._score:g} of 1"
            text = f"Wrong: {what}. Try again ({left} {'try' if left == 1 else 'tries'} left)."
        self._last = text
        return StepResult(text, self.reward(self.success, self._score, valid), self.done, self._info(valid))

    def _scored(self, answer: str) -> float:
        try:
            return max(0.0, min(1.0, float(self._items().score_answer(answer, self._entry))))
        except Exception:  # noqa: BLE001 - a scorer that chokes on an odd answer scores it 0, never a crash
            return 0.0

    def _info(self, valid: bool) -> dict[str, Any]:
        return {"success": self.success, "valid_action": valid, "suite_reward": self._score}

    @property
    def success(self) -> bool:
        return self._score >= 1.0

    def render(self) -> str:
        return self._last

    def content_key(self) -> str:
        return "" if self._entry is None else str(self._entry["question"])

    def state_key(self) -> str:
        return f"{self.content_key()}|{self._attempts}|{self._score}" + (",done" if self.done else "")

    def progress(self) -> float:
        return self._score

    def has_expert(self) -> bool:
        return self.gold_scores

    def expert_action(self) -> str | None:
        if self._entry is None or self.done or not self._gold_ok:
            return None
        return str(self._entry["answer"])

    def reference_text(self) -> str:
        """The reference answer (what an LLM judge compares with)."""
        return "" if self._entry is None else str(self._entry["answer"])

    def valid_actions(self) -> list[str] | None:
        """The answers a question may have, where the dataset bounds them (maze: every distance its config
        allows); None for the others."""
        space = ANSWER_SPACES.get(self.game)
        return None if space is None or self._entry is None else space(self._items().config)

    def snapshot(self) -> Any:
        return copy.deepcopy((self._entry, self._attempts, self._score, self._last, self.done))

    def restore(self, snapshot: Any) -> None:
        self._entry, self._attempts, self._score, self._last, self.done = copy.deepcopy(snapshot)


def game_class(dataset: str) -> type[ReasoningGymEnv]:
    """The environment class of ``rg:<dataset>``; Unavailable without the package."""
    factory = _factory(f"env 'rg:{dataset}' needs")
    if dataset not in factory.DATASETS:
        import difflib

        near = difflib.get_close_matches(dataset, list(factory.DATASETS), 3)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise ConfigError(f"unknown reasoning-gym dataset {dataset!r}{hint}")
    name = f"rg:{dataset}"
    cls = type(name, (ReasoningGymEnv,), {"name": name, "game": dataset})
    cls.instructions = (f"reasoning-gym {dataset}: solve the puzzle in the message. Reply with the answer only, "
                        f"in the format the question asks for.")
    cls.examples = _examples(cls)
    cls.gold_scores = bool(cls.examples)
    return cls


def _examples(cls: type[ReasoningGymEnv]) -> list[tuple[str, str]]:
    """One solved training question (question, reference answer); none where the reference answer does not
    score 1 (then the dataset has no expert either)."""
    env = cls(split="train")
    try:
        question = env.reset(0)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a dataset that fails to generate cannot be played at all
        raise Unavailable(f"env {cls.name!r} does not generate questions here ({type(e).__name__}: {e})") from None
    answer = env.expert_action()
    return [] if answer is None else [(question, answer)]


ADAPTER = ReasoningGymEnv  # what selfevolve.envs.suites.adapters() lists
