"""Curiosity-driven exploration (AgentEvolver self-questioning, stage 1; ``shared/design/methods.md`` §7).

The policy, sampling at temperature 1.0, is put in a tool world with no task and asked to find out what the
world holds, one tool call per turn:

- **breadth** for the first ``breadth_steps`` turns: after each result it is told which operations it has not
  tried yet, so that the first calls scan the world's operations rather than repeat one;
- **depth** afterwards: it is asked to feed a value from a result (an id, a name) into another operation, so
  that calls chain the way a real request's calls do;
- a **myopic window**: only the last ``window`` turns are shown (``PromptBuilder.history``), as in the paper —
  exploration is local, and short prompts keep it cheap;
- **an anchor** (``ToolWorld.exploration_anchor``, ours): a world whose operations all need an identifier no
  call can list shows one record to start from (the shop: a training customer's name and email per sandbox);
- **no identical repeats**: a call made before is refused (the world is not stepped) and the model is told so;
  so is ``finish`` (there is no task to end);
- **prefill** (``questioning.prefill``, an output-format aid, not in the paper): each reply starts with the
  opening of a tool call, which the model completes (``TextEnv.reply_prefix``). ``format`` starts every reply
  with ``<tool_call>`` and the ``"name"`` key; ``operation`` (the default) starts a breadth reply with the
  call of one operation not used yet, up to its first argument's value, so the model chooses the values (and,
  in depth, the operation). Untrained, the 135M explorer wrote almost no parseable call (docs/benchmarks.md).

Many explorations run as one batched rollout (``rollout.runner.rollout``). Each exploration's calls and results
are what the task writer (``synthesize.py``) reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selfevolve.envs.base import StepResult, TextEnv
from selfevolve.envs.tools.calls import CLOSE_TAG, OPEN_TAG, CallError
from selfevolve.errors import SelfEvolveError

BRIEF = ("There is no request and no task yet. Explore this system: call one tool per reply to find out what "
         "data it holds ({entities}). Do not call finish.")
BREADTH_HINT = "Next, try an operation you have not used yet: {ops}."
DEPTH_HINT = "Next, use a value from a result above (an id, a name, an email) as an argument of another operation."
REPEAT = "Error: you already made this exact call. Make a different one."
NO_FINISH = "Error: there is no task to finish; keep exploring with the other tools."
CALL_OPEN = OPEN_TAG + '\n{"name": "'  # the tool-call format of envs/tools/calls.py, up to the tool's name
PREFILLS = ("none", "format", "operation")


class Exploration(TextEnv):
    """A tool world without a task, wrapped for exploring: the world is a fresh copy of its state (the one a
    training task starts from); ``finish`` and repeated calls are refused, and every result is followed by the
    breadth or depth hint."""

    max_turns = 8

    def __init__(self, world, breadth_steps: int = 4, max_turns: int = 8, entities: str = "",
                 prefill: str = "operation"):
        if prefill not in PREFILLS:
            raise ValueError(f"prefill must be one of {', '.join(PREFILLS)}, not {prefill!r}")
        self.world, self.breadth_steps, self.max_turns = world, breadth_steps, max_turns
        self.entities, self.prefill = entities, prefill
        self.name = f"explore-{world.name}"
        self.instructions, self.examples = world.instructions, world.examples
        self.tools, self.tool_instructions = world.tools, world.tool_instructions
        self.operations = [t.name for t in world.toolset if t.name != "finish"]

    def reset(self, seed: int) -> str:
        self.world.reset(seed)  # a training task's fresh world; its request is not shown
        self.seed, self.turn, self.keys, self.used = seed, 0, set(), []
        self.log: list[dict[str, Any]] = []
        anchor = getattr(self.world, "exploration_anchor", None)  # e.g. a customer of the shop to start from
        anchor = anchor(seed) if callable(anchor) else ""
        return BRIEF.format(entities=self.entities or "its records") + (f" {anchor}" if anchor else "")

    def unused(self) -> list[str]:
        """The operations still to try in the breadth phase (none after it)."""
        return [op for op in self.operations if op not in self.used] if self.turn < self.breadth_steps else []

    def hint(self) -> str:
        unused = self.unused()
        return BREADTH_HINT.format(ops=", ".join(unused)) if unused else DEPTH_HINT

    def reply_prefix(self) -> str:
        """The opening of the next reply's tool call (see the module docstring): with ``operation``, in breadth,
        the call of an unused operation — a different one per sandbox seed, so that a batch of explorations
        does not all start with the same operation — up to its first required argument's value."""
        unused = self.unused() if self.prefill == "operation" else []
        if self.prefill == "none":
            return ""
        if not unused:
            return CALL_OPEN
        op = unused[(self.seed + self.turn) % len(unused)]
        schema = self.world.toolset[op].parameters
        required = schema.get("required", [])
        first = ""
        if required:  # a string value opens with its quote: untrained, the model wrote bare numbers for ids
            string = schema.get("properties", {}).get(required[0], {}).get("type") == "string"
            first = f'"{required[0]}": ' + ('"' if string else "")
        return f'{CALL_OPEN}{op}", "arguments": {{{first}'

    def step(self, action: str) -> StepResult:
        self.turn += 1
        action = first_call(action)
        done = self.turn >= self.max_turns
        try:
            call = self.world.toolset.parse(action)
        except CallError:
            call = None
        refusal = None if call is None else REPEAT if call.key() in self.keys else \
            NO_FINISH if call.name == "finish" else None
        if refusal is not None:  # the world is not stepped
            self.log.append({"call": call.text(), "valid": False, "repeat": refusal == REPEAT, "result": refusal})
            return StepResult(f"{refusal}\n{self.hint()}", 0.0, done, {"success": False, "valid_action": False})
        obs, _, world_done, info = self.world.step(action)
        valid, error = bool(info.get("valid_action")), bool(info.get("tool_error"))
        if call is not None and valid:
            self.keys.add(call.key())
            self.used.append(call.name)
        self.log.append({"call": call.text() if call is not None else action, "valid": valid and not error,
                         "repeat": False, "result": obs})
        return StepResult(f"{obs}\n{self.hint()}", 0.0, done or world_done,
                          {"success": False, "valid_action": valid, "tool_call": info.get("tool_call")})


def first_call(reply: str) -> str:
    """The reply's tool call cut after its first complete JSON object: a small model often goes on writing
    after a well-formed call (``...}}, "new_id": 12}``), which the strict parser rejects as a whole. Exploration
    needs calls that run, not a clean reply, so the rest is dropped; a reply without a complete object after
    ``<tool_call>`` is returned unchanged (and refused by the world as before)."""
    open_at = reply.find(OPEN_TAG)
    if open_at < 0:
        return reply
    body = reply[open_at + len(OPEN_TAG):].lstrip()
    body = body.removeprefix("```json").removeprefix("```").lstrip()
    try:
        obj, _ = json.JSONDecoder().raw_decode(body)
    except (json.JSONDecodeError, RecursionError):
        return reply
    if not isinstance(obj, dict):
        return reply
    return f"{reply[:open_at]}{OPEN_TAG}\n{json.dumps(obj, ensure_ascii=False)}\n{CLOSE_TAG}"


@dataclass
class ExplorationRecord:
    """One exploration: the sandbox seed and its turns ``{"call", "valid", "repeat", "result"}``."""

    seed: int
    turns: list[dict[str, Any]] = field(default_factory=list)

    @property
    def good_turns(self) -> list[dict[str, Any]]:
        """The calls that ran without error (what a task can be written from)."""
        return [t for t in self.turns if t["valid"]]

    def text(self, max_result_chars: int = 400) -> str:
        """The calls that ran and their results, numbered (the task writer's input)."""
        lines = []
        for k, t in enumerate(self.good_turns, 1):
            result = t["result"] if len(t["result"]) <= max_result_chars else t["result"][:max_result_chars] + "…"
            lines.append(f"{k}. {t['call'].replace(chr(10), ' ')}\n   Result: {result}")
        return "\n".join(lines)


def explore(policy, builder, world_factory, *, explorations: int, steps: int, breadth_steps: int,
            entities: str = "", seed: int = 0, first_seed: int = 0, exploration=Exploration) -> list[ExplorationRecord]:
    """``explorations`` batched explorations of ``steps`` turns each, sandboxes from training seeds
    ``first_seed``, ``first_seed + 1``, ...; ``builder`` should show a window of the last turns
    (``history``). Sampling uses the policy's temperature with a generator seeded by ``seed``.
    ``exploration``: the wrapper class, ``(world, breadth_steps, max_turns, entities)``; :class:`Exploration`
    for tool worlds, ``games.GameExploration`` for FrozenLake, ``sokoban.SokobanExploration`` for Sokoban
    (both ``grid.GridExploration``)."""
    from selfevolve.rollout.runner import rollout
    from selfevolve.types import Task

    envs = [exploration(world_factory(), breadth_steps, steps, entities) for _ in range(explorations)]
    tasks = [Task(id=f"explore-{first_seed + i}", env=envs[0].name, seed=first_seed + i) for i in range(explorations)]
    gen = policy.stream(seed)
    rollout(policy, envs, tasks, builder, max_turns=steps, generator=gen, reuse_cache=builder.history is None)
    return [ExplorationRecord(seed=t.seed, turns=env.log) for t, env in zip(tasks, envs)]


# ---- the records of a run's explorations (``explorations.jsonl``) ---------------------------------------------
def fresh_out(folder: str) -> Path:
    """The output folder, created, with the files of an earlier run removed: its files describe one run."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("explorations.jsonl", "llm_calls.jsonl", "tasks.jsonl", "report.json"):
        (out / name).unlink(missing_ok=True)
    return out


def load_explorations(path: str, env_name: str) -> list[ExplorationRecord]:
    """``questioning.explorations_from``: the explorations of an earlier run (its ``questioning.out`` folder or
    its ``explorations.jsonl``), to write tasks from them again — another writer, another prompt — without
    exploring anew. The earlier run's ``report.json``, when beside it, must name the same world."""
    given = Path(path)
    file = given / "explorations.jsonl" if given.is_dir() else given
    if not file.is_file():
        raise SelfEvolveError(f"questioning.explorations_from: no explorations file at {file}")
    report = file.parent / "report.json"
    if report.is_file():
        env = json.loads(report.read_text()).get("env")
        if env not in (None, env_name):
            raise SelfEvolveError(f"questioning.explorations_from: {file} explored {env!r}, not {env_name!r}")
    records = []
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
            records.append(ExplorationRecord(seed=int(row["seed"]), turns=list(row["turns"])))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise SelfEvolveError(f"{file}, line {n}: not an exploration record ({e})") from None
    return records


def explorations(cfg, out: Path, say, run) -> list[ExplorationRecord]:
    """The explorations to write from: loaded (``questioning.explorations_from``, read before ``out`` is
    emptied, as it may be the same folder) or made by ``run()``; saved to ``out`` either way."""
    q = cfg.questioning
    if q.explorations_from:
        records = load_explorations(q.explorations_from, cfg.env.name)
        say(f"writing from {len(records)} saved explorations ({q.explorations_from})")
    else:
        records = run()
    save_explorations(fresh_out(str(out)), records)
    return records


def save_explorations(out: Path, records) -> None:
    """``explorations.jsonl``: every exploration, every turn."""
    with (out / "explorations.jsonl").open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({"seed": r.seed, "turns": r.turns}, ensure_ascii=False) + "\n")
