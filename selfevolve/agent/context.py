"""Context-manager templates: what the model is shown of its own episode at each call (``agent.context``).

- ``causal``: append-only. Each prompt is the previous prompt, the exact reply ids and the new observation
  (``agent.history=K`` instead shows the last K turns, re-rendered, without a note: the games' bounded
  history, kept as it was).
- ``reasoning``: the model thinks before it acts (``<think>...</think>`` then the action); earlier replies are
  shown with their ``<think>`` blocks stripped, so old reasoning does not fill the context.
- ``sliding_window``: append-only while the prompt fits ``budget`` tokens; over it, the chat keeps the
  initial messages (system prompt, few-shot turns, the first observation) and the last ``window`` turns, and
  one user message ``[N earlier turns omitted]`` stands for the rest.
- ``self_managed``: append-only while the prompt fits; over it, one extra model call (the *context call*)
  is shown the earlier messages, numbered, and answers with a JSON object
  ``{"remove": [2, 3], "compress": {"1": "short summary"}}``: messages to drop, and messages to replace by a
  summary (``[summary] ...``); the rest are kept. An answer that is not such an object (or names a number out
  of range) falls back to the sliding window, and so does an edit that still leaves the prompt over budget:
  the context call can never crash an episode or let the prompt grow without bound.

A "turn" is a reply and the observation that answered it. The first observation (the task) is never dropped.

Exactness: every model call's input is recorded. A step's ``prompt_ids`` are exactly the ids of its call;
the context calls made before a step are in ``Step.calls`` (prompt ids, reply ids, log-probs, text and the
decision) and are not trained on. Training rows are built from ``prompt_ids`` + ``action_ids`` only
(``objectives/samples.py``): steps whose prompt extends the previous row are packed, every other step starts a
row of its own, so each reply is trained on exactly the input it was sampled from.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from selfevolve.agent.parsing import strip_think
from selfevolve.agent.guidance import NO_GUIDANCE, Guidance
from selfevolve.untrusted import loads_json, too_long

CONTEXTS = ("causal", "reasoning", "sliding_window", "self_managed")

MANAGE_INSTRUCTIONS = (
    "Your conversation is too long for your memory. Below are its earlier messages, numbered. Decide what to "
    "forget. Answer with one JSON object and nothing else: "
    '{"remove": [numbers of messages to drop], "compress": {"number": "a short summary of that message"}}. '
    "Messages you do not name are kept. Keep what you still need to finish the task."
)


@dataclass
class ContextSpec:
    """The ``agent.context*`` settings."""

    name: str = "causal"
    budget: int = 2048  # prompt tokens above which sliding_window / self_managed act
    window: int = 4  # K: the last turns the sliding window keeps
    call_tokens: int = 64  # reply budget of the self-managed context call

    def __post_init__(self):
        if self.name not in CONTEXTS:
            raise ValueError(f"agent.context must be one of {', '.join(CONTEXTS)}, got {self.name!r}")


def omitted_note(n: int) -> dict:
    return {"role": "user", "content": f"[{n} earlier turns omitted]"}


class EpisodeContext:
    """One episode's context: the messages shown after the header and the ids of the next model call.

    ``prompt`` is the input of the next call. After the world answers, :meth:`advance` updates it; when a
    self-managed context call is due, ``pending`` is set and the caller runs it on :meth:`call_prompt` and
    hands the reply to :meth:`resolve` (``None``: no model to ask, e.g. expert episodes: slide instead).
    """

    def __init__(self, builder, instruction: str, first_observation: str, guidance: Guidance | None = None):
        self.b, self.spec, self.instruction = builder, builder.context, instruction
        self.guidance = guidance or NO_GUIDANCE
        self.observations, self.replies = [first_observation], []
        self.body = [builder.observation_message(first_observation, first=True)]
        self.omitted = 0  # turns replaced by the note (sliding window); the note is body[1] when > 0
        self.pending = False
        self.calls: list[dict] = []  # context calls made since the last step (moved to it by the caller)
        self.recalled: list[int] | None = None  # pool ids shown this turn (SEER), recorded in the step's info
        # A guided episode (an insight block in its system prompt, or recalled examples to strip) keeps a twin
        # without them, advanced in lockstep: its prompt is the training sample (experience stripping, built by
        # the prompt builder). The twin never slides a window by its own length: it slides when the guided
        # episode does (``slide``), so that its prompt is always the guided prompt minus what is stripped. Deciding by its own, shorter length made
        # it slide later than the guided one in ~7 % of turns of a sliding_window run.
        self.twin: EpisodeContext | None = None
        self.follower = False  # a twin: its window moves with its guided episode's
        self.prompt = builder.prompt_ids(self.observations, [], instruction, self.guidance)
        if self.guidance.block or self.guidance.strip_examples:
            kept = None if self.guidance.strip_examples else self.guidance.episodes
            self.twin = EpisodeContext(builder, instruction, first_observation, Guidance(episodes=kept))
            self.twin.follower = True

    @property
    def train_prompt(self) -> list[int] | None:
        """The ids to train on for this turn when they differ from :attr:`prompt` (the stripped twin's)."""
        return self.twin.prompt if self.twin is not None else None

    def render(self) -> list[int]:
        return self.b.render(self.b.header(self.instruction, self.guidance) + self.body)

    def set_examples(self, episodes: tuple | None) -> None:
        """Show other few-shot episodes from now on (SEER recalls at every turn); the prompt is re-rendered
        only when they changed. The twin gets the same examples (only the insight block is stripped) unless they
        are stripped too (``Guidance.strip_examples``): then it keeps the static ones."""
        if episodes == self.guidance.episodes:
            return
        self.guidance = Guidance(episodes=episodes, block=self.guidance.block,
                                 strip_examples=self.guidance.strip_examples)
        if self.spec.name == "causal":
            self.prompt = self.b.prompt_ids(self.observations, self.replies, self.instruction, self.guidance)
        else:
            self.prompt = self.render()
        if self.twin is not None and not self.guidance.strip_examples:
            self.twin.set_examples(episodes)

    def fork(self) -> "EpisodeContext":
        """An independent copy (a search branch): later advances of either leave the other unchanged."""
        other = copy.copy(self)
        other.observations, other.replies = list(self.observations), list(self.replies)
        other.body, other.calls = list(self.body), list(self.calls)
        other.twin = self.twin.fork() if self.twin is not None else None
        return other

    def advance(self, reply_ids: list[int], reply_text: str, observation: str) -> None:
        """The model answered ``reply_ids`` (``reply_text``) and the world showed ``observation``."""
        if self.twin is not None:
            self.twin.advance(reply_ids, reply_text, observation)
        self.observations.append(observation)
        self.replies.append(reply_text)
        name = self.spec.name
        if name == "causal":
            self.prompt = self.b.next_prompt_ids(self.prompt, reply_ids, self.observations, self.replies,
                                                 self.instruction, self.guidance)
            return
        shown = strip_think(reply_text) if name == "reasoning" else reply_text
        self.body += [{"role": "assistant", "content": shown}, self.b.observation_message(observation, first=False)]
        if name == "reasoning":  # an earlier reply changed (its thinking is gone): re-render
            self.prompt = self.render()
            return
        extended = self.b.extend(self.prompt, reply_ids, observation)
        candidate = extended if extended is not None else self.render()
        if len(candidate) <= self.spec.budget or self.follower:
            self.prompt = candidate
        elif name == "self_managed":
            self.pending = True
        else:
            self.slide()

    # ------------------------------------------------------------------ sliding window
    def _start(self) -> int:
        return 2 if self.omitted else 1  # after the first observation (and the note)

    def slide(self) -> None:
        """Keep the first observation and the last ``window`` turns; one note stands for the turns dropped."""
        rest = self.body[self._start():]
        turns: list[list[dict]] = []
        for m in rest:  # a turn starts at each reply (a message before any reply joins the first turn)
            if m["role"] == "assistant" or not turns:
                turns.append([])
            turns[-1].append(m)
        dropped = max(0, len(turns) - self.spec.window)
        self.omitted += dropped
        kept = [m for t in turns[dropped:] for m in t]
        self.body = self.body[:1] + ([omitted_note(self.omitted)] if self.omitted else []) + kept
        self.prompt = self.render()
        if self.twin is not None:  # the training twin drops the same turns
            self.twin.slide()

    # ------------------------------------------------------------------ self-managed
    def numbered(self) -> list[dict]:
        """The messages the context call may edit: all but the first observation, the note and the latest
        observation."""
        return self.body[self._start():-1]

    def call_prompt(self) -> list[int]:
        listing = "\n".join(f"[{i}] {m['role']}: {m['content']}" for i, m in enumerate(self.numbered(), 1))
        return self.b.render([{"role": "system", "content": MANAGE_INSTRUCTIONS},
                              {"role": "user", "content": listing}])

    def resolve(self, text: str | None, record: dict) -> None:
        """Apply the context call's answer ``text`` (``record``: the call's ids, kept in ``calls``)."""
        msgs = self.numbered()
        decision = parse_decision(text, len(msgs)) if text is not None else None
        if decision is not None:
            remove, compress = decision
            kept = [m if i not in compress else {"role": m["role"], "content": f"[summary] {compress[i]}"}
                    for i, m in enumerate(msgs, 1) if i not in remove]
            self.body = self.body[:self._start()] + kept + self.body[-1:]
            self.prompt = self.render()
        fallback = decision is None or len(self.prompt) > self.spec.budget
        if fallback:
            self.slide()
        if text is not None:  # a model call was made: record it (None: nobody was asked)
            self.calls.append({**record, "purpose": "context", "text": text, "fallback": fallback,
                               "decision": None if decision is None else
                               {"remove": sorted(decision[0]),
                                "compress": {str(k): v for k, v in decision[1].items()}}})
        self.pending = False

    def take_calls(self) -> list[dict]:
        calls, self.calls = self.calls, []
        return calls


def parse_decision(text: str, n: int) -> tuple[set[int], dict[int, str]] | None:
    """``(remove, compress)`` from a context call's answer, or None when it is not a valid decision: one JSON
    object (text around it is ignored) with only ``remove`` (a list of message numbers 1..n) and ``compress``
    (number -> non-empty summary) keys, no number in both. A reply longer than ``MAX_ACTION_CHARS`` is not one."""
    if too_long(text):
        return None
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = loads_json(text[start:end + 1])  # bounded: the reply is model output (selfevolve/untrusted.py)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not set(data) <= {"remove", "compress"}:
        return None
    remove, compress = data.get("remove", []), data.get("compress", {})
    if not isinstance(remove, list) or not isinstance(compress, dict):
        return None

    def number(x) -> int | None:
        if isinstance(x, bool):
            return None
        # isdecimal() alone admits other scripts' digits; a long string of digits is no message number
        if isinstance(x, str) and x.strip().isascii() and x.strip().isdecimal() and len(x.strip()) <= 6:
            x = int(x)
        return x if isinstance(x, int) and 1 <= x <= n else None

    drop = {number(x) for x in remove}
    summaries = {number(k): v for k, v in compress.items()}
    if None in drop or None in summaries or drop & set(summaries):
        return None
    if not all(isinstance(v, str) and v.strip() for v in summaries.values()):
        return None
    return drop, {k: " ".join(v.split()) for k, v in summaries.items()}
