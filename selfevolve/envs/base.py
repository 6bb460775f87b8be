"""The environment protocol: what every world offers the rollout engine.

An environment owns its rules and its state. It is reset from a seed (the same seed gives the same start state,
which is what makes G rollouts of one task a *group*), and stepped with the model's action *text*. Bad actions
are never exceptions: they come back as an error observation, a small penalty, no state change and
``info["valid_action"] = False``.

To write your own, subclass :class:`TextEnv` and fill in ``reset`` and ``step`` (see ``docs/environments.md``
for a 30-line example); no registration is needed to train on it from Python.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class StepResult:
    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)  # always holds "success" and "valid_action"

    def __iter__(self):  # allows `obs, reward, done, info = env.step(a)`
        return iter((self.observation, self.reward, self.done, self.info))


class TextEnv(ABC):
    """Base class for text environments.

    Class attributes describe the world to the prompt builder:

    - ``instructions``: the rules and the answer format, shown in the system prompt;
    - ``examples``: few-shot example turns ``[(observation, action), ...]`` shown before the real episode — small
      models need them to produce valid actions at all;
    - ``max_turns``: the default turn limit of an episode (the rollout stops it there);
    - ``tools`` / ``tool_instructions``: optional function-calling schemas and the rules without their text
      listing, for chat templates that render tools themselves.

    Subclasses implement :meth:`reset` and :meth:`step`. The defaults of :meth:`snapshot`/:meth:`restore`
    deep-copy ``self.__dict__``, which is exact for any environment whose state lives in plain Python objects;
    when that copy fails (a live engine, a process handle) search replays the episode's moves instead
    (``envs/replay.py``), or the environment gives its own snapshots.

    Lifetime: the trainer makes environments once and reuses them across episodes (``reset`` starts a new one;
    set ``reusable = False`` if yours cannot), and calls :meth:`close` on every environment it made. The
    constructor should only check options and keep them: probes (the prompt builder, the warm start's
    :meth:`has_expert`) construct environments without playing, so anything costly starts in ``reset``.
    """

    name: ClassVar[str] = "env"
    instructions: ClassVar[str] = ""
    examples: ClassVar[list[tuple[str, str]]] = []
    max_turns: int = 10
    # Function calling (tool worlds): the tools' JSON schemas, and the system prompt to use instead of
    # ``instructions`` when the model's chat template renders the schemas itself (see agent/prompt.py).
    tools: ClassVar[list[dict[str, Any]] | None] = None
    tool_instructions: ClassVar[str] = ""
    reusable: ClassVar[bool] = True  # reset(seed) starts a clean episode: one instance may play many

    @abstractmethod
    def reset(self, seed: int) -> str:
        """Start a new episode from ``seed`` and return the first observation."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply the model's action text; return observation, reward, done and info."""

    def state_key(self) -> str:
        """A hashable key of the true state (GiGPO anchors). Default: the current rendering."""
        return self.render()

    def render(self) -> str:
        """The current observation text."""
        return ""

    def content_key(self) -> str:
        """The content of the task this episode was reset to (the map, the room, the request), as a string: two
        seeds with the same content key are the same task. Held-out sets are content-disjoint by this key
        (``envs/holdout.py``). Called right after ``reset``; the default is the rendering then."""
        return self.render()

    def reply_prefix(self) -> str:
        """Text the model's next reply starts with ("" for none): the rollout puts its tokens after the prompt,
        the model continues from there, and the action is the prefix plus what the model wrote. Exploration
        uses it (``questioning/explore.py``) so that a small model's replies start as a tool call. Honoured by
        ``rollout/runner.py`` (sampling, best-of-N); beam and lookahead search refuse environments that set one."""
        return ""

    def expert_action(self) -> str | None:
        """A good action from the current state (e.g. a solver's next move), or None if the world has no expert.

        Used for the behaviour-cloning warm start (``train.warm_start_steps``) and by tests.
        """
        return None

    def has_expert(self) -> bool:
        """Whether :meth:`expert_action` can answer, told without starting a game (the warm start asks before
        it plays). The default: whether the class overrides ``expert_action``."""
        return type(self).expert_action is not TextEnv.expert_action

    def valid_actions(self) -> list[str] | None:
        """The actions that are valid in the current state, where the world can list them (the random valid
        policy of ``selfevolve bench`` draws from them); None where it cannot."""
        return None

    def progress(self) -> float:
        """A heuristic in [0, 1] of how close the episode is to success (search scorers, metrics)."""
        return 0.0

    def snapshot(self) -> Any:
        return copy.deepcopy(self.__dict__)

    def restore(self, snapshot: Any) -> None:
        self.__dict__.update(copy.deepcopy(snapshot))

    def close(self) -> None:
        """Release what the environment holds outside Python (a process, a connection). The trainer calls it
        on every environment it made; the default holds nothing."""
