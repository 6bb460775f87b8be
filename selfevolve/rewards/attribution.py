"""AgentEvolver's self-attributing (``shared/design/methods.md`` §7): every step of a trajectory labelled GOOD or
BAD — by an LLM that reads the whole trajectory and its outcome, or by an oracle that knows the environment's
truth — so that the credit of a step can differ from the credit of its episode (``algos/attribution.py``).

**The LLM judge.** One conversation per trajectory (batched over trajectories): the task, each step's action
and result, the outcome, and the seed's rules — with a *positive* outcome a step is GOOD if it advanced the
outcome or made a later step possible; with a *negative* one it is GOOD only if it really brought the agent
closer to a solution; a step whose output was not used, a repeated step and finishing with a wrong result are
BAD. The reply gives ``Step i Analysis: <reason>`` and ``Step i Judgment: GOOD|BAD`` per step (1-based), shown
once on a made-up task (small models copy a shown format far more reliably than a described one).
:func:`parse_step_judgments` reads the labels with fallbacks; a step still without a label gets the
**stated default — the outcome's polarity** (GOOD in a success, BAD in a failure; AgentEvolver's
``_align_flags``) and is counted (``attribution/defaulted``). No retries: a judgement costs a long reply.

**The oracles** (``rewards/oracle.py``) replay a trajectory from its task seed and label each step from the
state before and after it: FrozenLake and Sokoban by whether the step brought the goal closer, the tool worlds by
whether the call is part of the reference solution (or equivalent to it) and succeeded.

Where an oracle exists, an LLM judge is measured against it every step (:func:`agreement`: step accuracy,
balanced accuracy, earliest-error accuracy on failed trajectories); ``reward.attribution=oracle`` trains on
the oracle's labels (the method's upper bound). Each step keeps its judgement in
``Step.info["attribution"] = {"label", "rationale", "source", "defaulted"}`` (plus ``"oracle"``, the oracle's
label, when an LLM judged and an oracle exists), so the trajectory log and the viewer show it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from selfevolve.agent.parsing import parse_action
from selfevolve.envs.base import TextEnv
from selfevolve.errors import ConfigError
from selfevolve.rewards.judge import game_rules
from selfevolve.rewards.oracle import BAD, GOOD, Oracle, agreement
from selfevolve.untrusted import clean_text, too_long

ATTRIBUTION_SYSTEM = (
    "You judge every step of an agent's attempt at a task as GOOD or BAD.\n"
    "If the outcome was a success: a step is GOOD if it moved the task forward or made a later step possible; "
    "otherwise it is BAD.\n"
    "If the outcome was a failure: a step is GOOD only if it really brought the agent closer to solving the "
    "task; otherwise it is BAD.\n"
    "Always BAD: a step whose result was never used, a step that repeats an earlier one, an invalid action, and "
    "finishing with a wrong result.\n"
    "For every step write two lines: 'Step N Analysis: <one short reason>' and 'Step N Judgment: GOOD' or "
    "'Step N Judgment: BAD'."
)
# One worked exchange on a made-up task of no built-in world, with mixed labels in a failure (GOOD for the one
# step that helped) and each BAD rule at work: a repeat, a wrong action, a wrong final result.
ATTRIBUTION_EXAMPLE = (
    {"role": "user", "content": "Task: Book a table for two at an Italian restaurant on Friday at 7 pm.\n\n"
     "Step 1\nAction: search_restaurants(cuisine=italian)\nResult: Roma (id 4), Vesuvio (id 9)\n\n"
     "Step 2\nAction: search_restaurants(cuisine=italian)\nResult: Roma (id 4), Vesuvio (id 9)\n\n"
     "Step 3\nAction: book(restaurant=4, people=2, day=Saturday, time=19:00)\nResult: booked\n\n"
     "Step 4\nAction: finish(Your table at Roma is booked for Friday.)\nResult: finished\n\n"
     "Outcome: failure (the task was not solved).\n\nJudge each of the 4 steps."},
    {"role": "assistant", "content": "Step 1 Analysis: It found Italian restaurants, which the booking needs.\n"
     "Step 1 Judgment: GOOD\nStep 2 Analysis: It repeated the same search; the result was not used.\n"
     "Step 2 Judgment: BAD\nStep 3 Analysis: It booked Saturday instead of Friday.\nStep 3 Judgment: BAD\n"
     "Step 4 Analysis: It finished with a wrong result.\nStep 4 Judgment: BAD"},
)
MAX_ACTION_SHOWN = 300  # characters of an action in the judge prompt (a tool call is 40-200)
MAX_RESULT_SHOWN = 400  # characters of a result (a FrozenLake grid with hints is ~90, a shop order ~400)
MAX_RATIONALE = 300  # characters of an analysis kept on the step


def trajectory_text(task: str, start: str | None, steps: list[tuple[str, str]], success: bool) -> str:
    """The user message of one judgement: the task (and the start state, for games), the numbered steps, the
    outcome and the request."""
    parts = [f"Task: {task.strip()}"]
    if start:
        parts.append(f"Start:\n{start.strip()}")
    for i, (action, result) in enumerate(steps, 1):
        action = action if len(action) <= MAX_ACTION_SHOWN else action[:MAX_ACTION_SHOWN] + "…"
        result = result if len(result) <= MAX_RESULT_SHOWN else result[:MAX_RESULT_SHOWN] + "…"
        parts.append(f"Step {i}\nAction: {action.strip()}\nResult: {result.strip()}")
    outcome = "success (the task was solved)" if success else "failure (the task was not solved)"
    parts.append(f"Outcome: {outcome}.")
    parts.append(f"Judge each of the {len(steps)} steps.")
    return "\n\n".join(parts)


def attribution_messages(task: str, start: str | None, steps: list[tuple[str, str]], success: bool) -> list[dict]:
    """The judge prompt of one trajectory: the rules, the worked example, then the trajectory."""
    return [{"role": "system", "content": ATTRIBUTION_SYSTEM}, *ATTRIBUTION_EXAMPLE,
            {"role": "user", "content": trajectory_text(task, start, steps, success)}]


# ---- parsing ---------------------------------------------------------------------------------------------------
# Run on a normalised reply (markdown marks dropped, every whitespace run one space), so that each optional piece
# below has a bounded length and the search stays linear in the reply's length.
_MARKER = re.compile(r"step ?#?(\d{1,4})\b ?(?:(analysis|reasoning|reason|rationale|judgment|judgement|label|"
                     r"verdict) ?)?[:=.)\-]? ?", re.I)
_LABEL = re.compile(r"\b(good|bad)\b", re.I)
_ONLY_LABEL = re.compile(r"(good|bad)[.!]?", re.I)
_JUDGMENT_KINDS = ("judgment", "judgement", "label", "verdict")


def _normalise(text: str) -> str:
    return " ".join(text.replace("*", " ").replace("`", " ").split())


def parse_step_judgments(text: str, n: int) -> tuple[list[tuple[str | None, str]], str]:
    """``(label, rationale)`` of steps 1..n from a judge reply, label ``"GOOD"``, ``"BAD"`` or None (missing),
    and how the labels were read: ``"numbered"``, ``"bare"`` or ``"none"``.

    Read in order of preference:

    1. numbered: ``Step i Judgment: GOOD`` (also ``Judgement``/``Label``/``Verdict``; the label anywhere in the
       text up to the next step marker) or ``Step i: BAD`` (the label right after the marker); the first label
       given for a step counts, step numbers outside 1..n are ignored, and a reply numbered from 0 (``Step 0``
       labelled, ``Step n`` not) is shifted by one; a step with no such label but an analysis that is nothing
       but a label (``Step 5 Analysis: BAD``: SmolLM2-135M writes that once it is past the worked example's
       four steps) takes that label;
    2. bare, only when no step has a numbered label: the reply's GOOD/BAD words outside the analyses, in order,
       if there are at least n of them (AgentEvolver's fallback, which also counts the words of analyses; fewer
       cannot be aligned with the steps).

    The rationale of step i is the text after ``Step i Analysis:`` (or ``Reason:``, ``Rationale:``, or a plain
    ``Step i:`` not followed by a label) up to the next marker, cut to ``MAX_RATIONALE`` characters. Case and
    markdown (``**``) do not matter. A reply longer than ``MAX_ACTION_CHARS`` is not read (all None); never
    raises, and linear in the reply's length."""
    n = max(0, int(n))
    if n == 0 or not isinstance(text, str) or too_long(text):
        return [(None, "")] * n, "none"
    norm = _normalise(clean_text(text))
    marks = list(_MARKER.finditer(norm))
    labels: dict[int, str] = {}
    lone: dict[int, str] = {}  # "Step i Analysis: BAD": a label written where the analysis belongs
    reasons: dict[int, str] = {}
    outside: list[str] = []  # the text that is not an analysis (where bare labels may stand)
    pos = 0
    for j, m in enumerate(marks):
        step = int(m.group(1))
        end = marks[j + 1].start() if j + 1 < len(marks) else len(norm)
        segment = norm[m.end(): end].strip()
        kind = (m.group(2) or "").lower()
        first = _LABEL.match(segment)
        if kind in _JUDGMENT_KINDS:
            found = _LABEL.search(segment)
            if found:
                labels.setdefault(step, found.group(1).upper())
        elif not kind and first:
            labels.setdefault(step, first.group(1).upper())
        elif _ONLY_LABEL.fullmatch(segment):
            lone.setdefault(step, segment[:4].strip(".!").upper())
        elif segment:
            reasons.setdefault(step, segment[:MAX_RATIONALE])
            outside.append(norm[pos:m.start()])
            pos = end
    outside.append(norm[pos:])
    labels = {**lone, **labels}
    if 0 in labels and n not in labels:  # numbered from 0
        labels = {k + 1: v for k, v in labels.items()}
        reasons = {k + 1: v for k, v in reasons.items()}
    if any(1 <= k <= n for k in labels):
        return [(labels.get(i), reasons.get(i, "")) for i in range(1, n + 1)], "numbered"
    bare = [w.upper() for w in _LABEL.findall(" ".join(outside))]
    if len(bare) >= n:
        return [(bare[i - 1], reasons.get(i, "")) for i in range(1, n + 1)], "bare"
    return [(None, reasons.get(i, "")) for i in range(1, n + 1)], "none"


# ---- the LLM judge ---------------------------------------------------------------------------------------------
@dataclass
class JudgeItem:
    """What the judge reads of one trajectory."""

    task: str
    start: str | None
    steps: list[tuple[str, str]]  # (action, result) per step
    success: bool


def judge_item(traj, rules: str = "") -> JudgeItem:
    """A trajectory as the judge reads it. ``rules``: the environment's instructions for games (the task, with the
    first observation as the start); empty for tool worlds, whose request (the first observation) is the task."""
    query = traj.query or traj.task.instruction or ""
    steps = []
    for s in traj.steps:
        action = parse_action(s.action_text) or s.action_text  # an unparsable reply is shown as it was
        steps.append((clean_text(action), clean_text(s.observation)))
    if rules:
        return JudgeItem(rules, query, steps, bool(traj.success))
    return JudgeItem(query, None, steps, bool(traj.success))


def judgement(label: str, rationale: str, source: str, defaulted: bool = False) -> dict[str, Any]:
    """One step's ``Step.info["attribution"]``."""
    return {"label": label, "rationale": rationale, "source": source, "defaulted": defaulted}


def judgment_grammar(n: int, analysis_tokens: int = 24):
    """``attribution.constrained``: the judge's reply as a grammar (``models/constrained.py``) — for each step
    ``Step i Analysis:`` and a line of the model's own words, then ``Step i Judgment:`` and GOOD or BAD, nothing
    else — so that every step of every reply has a label the parser reads (the words of the analysis and the
    label are still the model's choice)."""
    from selfevolve.models.constrained import Free, Lit, OneOf

    def grammar():
        for i in range(1, n + 1):
            yield Lit(f"Step {i} Analysis:")
            yield Free(end="\n", max_tokens=analysis_tokens, forbid="\n\r")
            yield Lit(f"Step {i} Judgment:")
            yield OneOf([" GOOD", " BAD"])
            if i < n:
                yield Lit("\n")
    return grammar


def judge_steps(llm, items: list[JudgeItem], tokens_per_step: int = 48, max_new_tokens: int = 512,
                constrained: bool = False) -> tuple[list[list[dict]], dict[str, float]]:
    """Judgements of every step of ``items`` by ``llm`` (one conversation per trajectory), and counts:
    ``attribution/calls`` (conversations), ``attribution/defaulted`` (steps given the default label),
    ``attribution/unparsed`` (replies without any label), ``attribution/bare`` (replies read by the bare-word
    fallback).

    The conversations are sent shortest trajectory first, in chunks of the LLM's batch size, each chunk with a
    reply budget of ``tokens_per_step`` × its longest trajectory's steps (at most ``max_new_tokens``): a small
    model that never stops writes to its budget, and most trajectories are short. ``constrained``: each reply is
    decoded under :func:`judgment_grammar` (a local judge; its budget then covers the grammar's longest reply)."""
    out: list[list[dict]] = [[] for _ in items]
    stats = {"attribution/calls": 0, "attribution/defaulted": 0, "attribution/unparsed": 0, "attribution/bare": 0}
    order = sorted((i for i, it in enumerate(items) if it.steps), key=lambda i: len(items[i].steps))
    size = max(1, int(getattr(llm, "batch_size", len(order) or 1)))
    for start in range(0, len(order), size):
        chunk = order[start:start + size]
        longest = max(len(items[i].steps) for i in chunk)
        budget = max(16, min(max_new_tokens, tokens_per_step * longest + 8))
        convs = [attribution_messages(items[i].task, items[i].start, items[i].steps, items[i].success)
                 for i in chunk]
        grammars = None
        if constrained and getattr(llm, "constrains", False):
            grammars = [judgment_grammar(len(items[i].steps)) for i in chunk]
            budget = max(budget, 48 * longest)  # a constrained reply's longest: 24 free tokens + ~20 fixed a step
        more = {"grammars": grammars} if grammars else {}  # an LLM stand-in without grammars is asked plainly
        replies = llm.chat(convs, purpose="attribution", max_new_tokens=budget, **more)
        stats["attribution/calls"] += len(convs)
        for i, reply in zip(chunk, replies):
            parsed, how = parse_step_judgments(reply, len(items[i].steps))
            default = GOOD if items[i].success else BAD
            stats["attribution/unparsed"] += how == "none"
            stats["attribution/bare"] += how == "bare"
            for label, reason in parsed:
                stats["attribution/defaulted"] += label is None
                out[i].append(judgement(label or default, reason, "llm", defaulted=label is None))
    return out, stats



# ---- the trainer's stage ---------------------------------------------------------------------------------------
class Attributor:
    """``reward.attribution=llm|oracle``: labels every step of a batch (``Step.info["attribution"]``) during the
    first ``attribution.steps`` updates and returns the stage's metrics. The credit path then reads the labels
    (``objectives/credit.py``)."""

    def __init__(self, mode: str, spec, env: TextEnv, llm=None):
        if mode not in ("llm", "oracle"):
            raise ConfigError(f"reward.attribution must be none, llm or oracle, got {mode!r}")
        self.mode, self.spec, self.llm = mode, spec, llm
        self.oracle = Oracle(env) if mode == "oracle" or Oracle.supports(env) else None
        self.rules = game_rules(env)

    @classmethod
    def build(cls, cfg, policy, env: TextEnv, out_dir) -> "Attributor | None":
        """The run's attributor (None with ``reward.attribution=none``); its LLM is ``attribution.llm``."""
        mode = cfg.reward.attribution
        if mode == "none":
            return None
        llm = None
        if mode == "llm":
            from selfevolve.models.llm import LLM

            llm = LLM(cfg.attribution.llm, policy, log_dir=out_dir, max_new_tokens=cfg.attribution.max_new_tokens,
                      dtype=cfg.model.dtype, seed=cfg.seed, api=cfg.llm_api)
        return cls(mode, cfg.attribution, env, llm)

    def active(self, updates_done: int) -> bool:
        """Whether the next update is attributed: the first ``attribution.steps`` updates are (all when null)."""
        return self.spec.steps is None or updates_done < self.spec.steps

    def __call__(self, trajs, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        truth = [self.oracle.labels(t) for t in trajs] if self.oracle is not None else None
        metrics: dict[str, float] = {}
        if self.mode == "oracle":
            judged = [[judgement(x["label"], x["rationale"], "oracle") for x in labels] for labels in truth]
        else:
            self.llm.step = step  # the calls belong to the step being made (resume truncates llm_calls.jsonl by it)
            judged, metrics = judge_steps(self.llm, [judge_item(t, self.rules) for t in trajs],
                                          self.spec.tokens_per_step, self.spec.max_new_tokens,
                                          constrained=self.spec.constrained)
        for i, (t, labels) in enumerate(zip(trajs, judged)):
            for k, (s, j) in enumerate(zip(t.steps, labels)):
                if truth is not None and self.mode == "llm":
                    j["oracle"] = truth[i][k]["label"]
                s.info["attribution"] = j
        labels = [j["label"] == GOOD for js in judged for j in js]
        metrics["attribution/good_share"] = sum(labels) / len(labels) if labels else 0.0
        metrics.setdefault("attribution/defaulted", 0)
        if truth is not None and self.mode == "llm":
            agree = agreement([[j["label"] == GOOD for j in js] for js in judged],
                              [[x["label"] == GOOD for x in xs] for xs in truth], [not t.success for t in trajs])
            for key in ("accuracy", "balanced_accuracy", "first_error_accuracy", "oracle_good_share"):
                if key in agree:
                    metrics[f"attribution/{key}"] = agree[key]
        metrics["attribution/seconds"] = time.perf_counter() - t0
        return metrics
