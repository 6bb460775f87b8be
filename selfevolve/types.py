"""The shared vocabulary: plain data types that flow between the stages.

tasks -> rollout -> trajectories -> rewards -> advantages -> update. Each stage takes and returns these
types, so each can be tested and swapped alone. They hold plain Python values (no tensors) so that they
serialise to JSONL as they are.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, asdict, dataclass, field, fields
from typing import Any


@dataclass
class Task:
    """One unit of work: which environment, from which start state, asking for what.

    A game's task is a seed of its environment (the seed fixes the map or the room): ``Task(id, env, seed)``. A
    request — a tool world's, or a game task that self-questioning wrote — also says what it asks
    (``instruction``, ``intent``), its split and difficulty, how success is checked (``goal``) and how to solve it
    (``solution``: the calls or moves of a reference solution). Worlds keep requests in task files, one per line
    (``envs/task_files.save_tasks``); an environment plays one by its seed (``task_for(seed)``) or by itself.
    """

    id: str
    env: str = ""
    seed: int = 0
    instruction: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None  # a reference solution as text, when one is known
    intent: str | None = None
    origin: str = "dataset"  # "dataset" | "synthesized"
    # The digest of the task's content (the map, the room, the request: ``envs/holdout.py``), set when an
    # environment is reset to it; a held-out task's content is never a training task's.
    content: str = ""
    _: KW_ONLY
    # a request's own (empty for a task that is a seed alone)
    split: str = ""  # "train", "test" or "synth"
    level: int = 0  # difficulty: shop 1-3, tables 1 (easy) or 2 (hard), games 1-2
    goal: dict[str, Any] = field(default_factory=dict)  # what the world checks: {"answer": ..., ...}
    solution: list[Any] = field(default_factory=list)  # a reference solution: tool calls or moves, in order

    REQUEST = ("split", "level", "goal", "solution")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON: every field, but a request's own only when set (a seed task's record is the same
        as it ever was)."""
        return {k: v for k, v in asdict(self).items() if k not in self.REQUEST or v}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Task":
        """The task of :meth:`to_dict`; keys that are not fields are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class Step:
    """One turn: what the model saw (exact ids), what it produced (exact ids) and what the world answered.

    Token-in, token-out: ``prompt_ids`` and ``action_ids`` are exactly the ids given to and sampled from the
    model; training never re-tokenises text. ``logprobs`` are the sampling policy's log-probabilities of
    ``action_ids`` (the "old" policy of PPO). ``entropy``, ``top1`` and ``top2`` are per generated token, over the
    full vocabulary (SELAUR's raw statistics: normalised entropy, least confidence, margin derive from them).
    """

    prompt_ids: list[int]
    action_ids: list[int]
    logprobs: list[float]
    entropy: list[float] = field(default_factory=list)
    top1: list[float] = field(default_factory=list)
    top2: list[float] = field(default_factory=list)
    action_text: str = ""
    observation: str = ""  # the environment's answer to this action
    reward: float = 0.0
    done: bool = False
    valid: bool = True
    state_key: str = ""  # the environment state the action was taken in (GiGPO anchors)
    info: dict[str, Any] = field(default_factory=dict)
    # Other model calls made to build this step's prompt (agent.context=self_managed's context call), each
    # {"purpose", "prompt_ids", "action_ids", "logprobs", "text", ...}: recorded exactly, never trained on.
    calls: list[dict[str, Any]] = field(default_factory=list)
    # The prompt to train on when it differs from ``prompt_ids``: an experience-guided step's prompt without
    # the insight block (self-navigating's stripping), built by the prompt builder. None: ``prompt_ids``.
    train_prompt_ids: list[int] | None = None


@dataclass
class Trajectory:
    """One episode of one task. ``group_id`` ties together the G rollouts of a task from the same start.

    Besides its steps, an episode carries what each stage of the flow learnt about it, each field written by one
    stage and None (or empty) until that stage runs: the rollout records the request, search where it kept the
    episode, experience how it was guided, the judge its score, credit its shaped reward, advantages and values.
    """

    task: Task
    steps: list[Step] = field(default_factory=list)
    group_id: str = ""
    success: bool = False
    # The version of the weights that sampled it: the number of updates the policy had had (a training step's
    # rollouts carry the step number). Ray workers stamp the version they were pushed (docs/scaling.md).
    policy_version: int | None = None
    # rollout: the request as the model first saw it (the first observation; a judge and SEER read it), and the
    # world's reference solution where it has one
    query: str | None = None
    reference: str = ""
    # rollout.search: how the episode was kept ({"strategy", "tree", "node", "score", ...}; search_trees.jsonl)
    search: dict[str, Any] | None = None
    # experience: the request's intent as the world knows it and as SEER classified it (``classified``: the
    # classifier ran; ``intent`` None then means its reply named none); self-navigating's insight block
    intent_true: str | None = None
    intent: str | None = None
    classified: bool = False
    guided: bool = False  # sampled with an insight block in the prompt (trained on the prompt without it)
    insights: list[int] = field(default_factory=list)  # the pool ids of that block's insights
    # reward.source=judge|both: the LLM judge's score in [0, 1]
    judge_score: float | None = None
    # credit: the episode's SELAUR-shaped reward (reward.shaping=selaur); the advantage of each turn it was
    # trained with, and V of each state (Self-AC: s_0..s_n, the final state's too; PPO: each turn's)
    shaped_reward: float | None = None
    advantages: list[float] | None = None
    values: list[float] | None = None

    @property
    def reward(self) -> float:
        """The episode's outcome reward: the sum of its step rewards."""
        return float(sum(s.reward for s in self.steps))

    @property
    def num_turns(self) -> int:
        return len(self.steps)

    def marks(self) -> dict[str, Any]:
        """The stages' fields that are set, by name (the ``flags`` of a record, as the viewer reads them)."""
        out: dict[str, Any] = {}
        if self.query is not None:
            out["query"] = self.query
        if self.reference:
            out["reference"] = self.reference
        if self.search is not None:
            out["search"] = self.search
        if self.intent_true is not None:
            out["intent_true"] = self.intent_true
        if self.classified:
            out["intent"] = self.intent
        if self.guided:
            out |= {"guided": True, "insights": list(self.insights)}
        named = {"judge_score": self.judge_score, "shaped_reward": self.shaped_reward, "advantages": self.advantages,
                 "values": self.values}
        return out | {k: v for k, v in named.items() if v is not None}

    def set_marks(self, flags: dict[str, Any]) -> None:
        """The inverse of :meth:`marks`: set the stages' fields from a record's ``flags`` (keys it does not know
        are ignored)."""
        for name in ("query", "reference", "search", "intent_true", "judge_score", "shaped_reward", "advantages",
                     "values"):
            if name in flags:
                setattr(self, name, flags[name])
        if "intent" in flags:
            self.intent, self.classified = flags["intent"], True
        if flags.get("guided"):
            self.guided, self.insights = True, list(flags.get("insights", []))

    def to_dict(self, with_ids: bool = True) -> dict[str, Any]:
        """Plain dict for JSONL. ``with_ids=False`` leaves out the token-level fields (prompt ids grow with every
        turn of a full-history chat: not worth copying for a readable log). What the stages learnt is under
        ``flags`` (:meth:`marks`)."""
        token_fields = () if with_ids else ("prompt_ids", "action_ids", "logprobs", "entropy", "top1", "top2",
                                            "train_prompt_ids")
        steps = [{f.name: getattr(s, f.name) for f in fields(s) if f.name not in token_fields} for s in self.steps]
        if not with_ids:
            for step in steps:
                step["calls"] = [{k: v for k, v in c.items() if k not in token_fields} for c in step["calls"]]
        return {"task": self.task.to_dict(), "steps": steps, "group_id": self.group_id, "success": self.success,
                "flags": self.marks(), "reward": self.reward, "policy_version": self.policy_version}
