"""What the model sees each turn: a multi-turn chat rendered with the model's own chat template.

The conversation is: a system message (the environment's rules, the task's instruction), few-shot example
turns (small models need them: SmolLM2-135M gives 0/64 valid FrozenLake moves zero-shot, 31/32 with two example
turns), then the episode — observations as user messages, the model's past replies as assistant messages.
``history`` bounds how many past turns are shown (the prompt stays flat as episodes grow).

The ids returned here are exactly what the model is given; the rollout stores them as the training sample's
prompt (token-in, token-out) — nothing is re-tokenised later.

With the full history (``history=None``, the default) the conversation only grows, so each turn's prompt is
built *incrementally*: the previous prompt, then the exact ids the model generated, then the template's ids
for the new observation. The model's own reply is never re-tokenised (re-tokenising can split the same text
differently), and every prompt extends the previous one, which lets the trainer pack a whole episode into a
single training row. Templates where this does not hold fall back to re-rendering the chat.

Function calling (the tool worlds): an environment with ``tools`` (JSON schemas) has its calls written as JSON
inside ``<tool_call>...</tool_call>``. When the model's chat template renders tools itself (Qwen, Hermes: it
uses the ``tools`` argument of ``apply_chat_template``), the schemas go through it and the system prompt is the
env's ``tool_instructions`` (the same rules without the listing); otherwise the env's ``instructions``, which
list the schemas as text in ``<tools>``, are the system prompt. Tool results come back as ``tool`` messages
when the template knows that role, else as user messages (the request that opens an episode is always a user
message). SmolLM2's template knows neither: it ignores ``tools`` and prints any role name verbatim, so for it
the schemas stay in the system prompt and results are user turns (``tests/test_prompt_tools.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from selfevolve.agent.context import ContextSpec
from selfevolve.agent.guidance import NO_GUIDANCE, Guidance
from selfevolve.agent.special_tokens import encode_rendered, holds_special

THINK_FORMAT = (
    "First think briefly inside <think> </think>, then give your action inside <answer> </answer>."
)


@dataclass
class PromptBuilder:
    tokenizer: object
    instructions: str
    examples: list[tuple[str, str]]
    history: int | None = None
    few_shot: bool = True
    think: bool = False
    tools: list[dict] | None = None  # function-calling schemas of a tool world, else None
    tool_instructions: str = ""  # the system prompt when the template renders ``tools`` itself
    context: ContextSpec = field(default_factory=ContextSpec)  # agent.context: see agent/context.py

    def __post_init__(self):
        self.template_tools = bool(self.tools) and template_renders_tools(self.tokenizer)
        self.observation_role = "tool" if self.tools and template_has_tool_role(self.tokenizer) else "user"

    def system_prompt(self, instruction: str = "", block: str = "") -> str:
        """The system message: the rules, the think format, an experience ``block`` (self-navigating's
        insights, see experience/navigation.py) and the task's instruction."""
        system = self.tool_instructions if self.template_tools and self.tool_instructions else self.instructions
        if self.think:
            system = f"{system}\n{THINK_FORMAT}"
        if block:
            system = f"{system}\n{block}"
        if instruction:
            system = f"{system}\n{instruction}"
        return system

    def header(self, instruction: str = "", guidance: Guidance | None = None) -> list[dict]:
        """The messages before the episode: the system prompt and the few-shot turns.

        ``guidance`` (one episode's, from the experience pool) may replace the static examples by recalled
        episodes (SEER) and add an insight block to the system prompt (self-navigating)."""
        g = guidance or NO_GUIDANCE
        msgs = [{"role": "system", "content": self.system_prompt(instruction, g.block)}]
        if g.episodes is not None:
            episodes = g.episodes
        else:
            episodes = [list(self.examples)] if self.few_shot and self.examples else []
        for episode in episodes:
            for k, (obs, act) in enumerate(episode):
                shown = f"<think>Let me think about the next step.</think><answer>{act}</answer>" if self.think else act
                msgs += [self.observation_message(obs, first=k == 0), {"role": "assistant", "content": shown}]
        return msgs

    def observation_message(self, observation: str, first: bool) -> dict:
        """An observation as a chat message: the first one (the task) from the user, later ones in
        ``observation_role`` (``tool`` for tool results when the template has that role)."""
        return {"role": "user" if first else self.observation_role, "content": observation}

    def render(self, messages: list[dict]) -> list[int]:
        """Ids of ``messages`` in the chat template (with the tool schemas when it renders them)."""
        return render_chat(self.tokenizer, messages, self.tools if self.template_tools else None)

    def messages(self, observations: list[str], actions: list[str], instruction: str = "",
                 guidance: Guidance | None = None) -> list[dict]:
        """Chat messages for the turn after ``actions`` (``len(observations) == len(actions) + 1``)."""
        assert len(observations) == len(actions) + 1, "one more observation than actions"
        msgs = self.header(instruction, guidance)
        first = 0 if self.history is None else max(0, len(actions) - self.history)
        for t in range(first, len(actions)):
            msgs += [self.observation_message(observations[t], first=t == 0),
                     {"role": "assistant", "content": actions[t]}]
        msgs.append(self.observation_message(observations[-1], first=len(actions) == 0))
        return msgs

    def prompt_ids(self, observations: list[str], actions: list[str], instruction: str = "",
                   guidance: Guidance | None = None) -> list[int]:
        return self.render(self.messages(observations, actions, instruction, guidance))

    def next_prompt_ids(
        self,
        prev_prompt: list[int],
        action_ids: list[int],
        observations: list[str],
        actions: list[str],
        instruction: str = "",
        guidance: Guidance | None = None,
    ) -> list[int]:
        """The prompt after the model answered ``action_ids`` to ``prev_prompt`` and the world showed
        ``observations[-1]``. Incremental (exact ids) for the full history, re-rendered for a window."""
        if self.history is None:
            extended = self.extend(prev_prompt, action_ids, observations[-1])
            if extended is not None:
                return extended
        return self.prompt_ids(observations, actions, instruction, guidance)

    def extend(self, prev_prompt: list[int], action_ids: list[int], observation: str) -> list[int] | None:
        """``prev_prompt`` + the exact reply ids + the template's ids of a new (non-first) observation; None
        when the template does not simply append a turn (then the chat must be re-rendered)."""
        delta = self._observation_delta(observation)
        if delta is None:
            return None
        # A reply cut by the token budget never closed its turn: close it (as prompt, not loss).
        closed = bool(action_ids) and action_ids[-1] in end_of_turn_ids(self.tokenizer)
        closing = [] if closed else [self.eot_id()]
        return list(prev_prompt) + list(action_ids) + closing + delta

    def eot_id(self) -> int:
        """The id that closes a chat turn (``<|im_end|>`` in ChatML, ``<end_of_turn>`` in Gemma's format, else the
        eos token)."""
        return _turn_end_id(self.tokenizer) or self.tokenizer.eos_token_id

    def _observation_delta(self, observation: str) -> list[int] | None:
        """Template ids between the end of an assistant reply and the next assistant opening, for ``observation``
        (``None`` when the template does not simply append: then the caller re-renders)."""
        return appended_turn_ids(self.tokenizer, self.observation_message(observation, first=False),
                                 self.tools if self.template_tools else None)


def appended_turn_ids(tokenizer, message: dict, tools: list[dict] | None = None) -> list[int] | None:
    """Template ids between the end of an assistant reply (after its end-of-turn id) and the next assistant
    opening, with ``message`` in between (its content literal, as in :func:`render_chat`).

    Found by rendering a probe chat with and without ``message``; ``None`` when the template does not simply
    append a turn.
    """
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"}]
    a = tokenizer.apply_chat_template(base, tools=tools, tokenize=False)
    eot = tokenizer.convert_ids_to_tokens(_turn_end_id(tokenizer) or tokenizer.eos_token_id)
    i = a.rfind(eot)

    def delta(msgs: list[dict]) -> str | None:
        b = tokenizer.apply_chat_template(base + msgs, tools=tools, tokenize=False, add_generation_prompt=True)
        return a[i + len(eot):] + b[len(a):] if b.startswith(a) else None

    if i < 0 or delta([message]) is None:
        return None
    return encode_rendered(tokenizer, delta, [message])


def end_of_turn_ids(tokenizer) -> set[int]:
    """Ids that end the model's turn: eos, and the turn's closing token (``<|im_end|>`` in ChatML models,
    ``<end_of_turn>`` in Gemma's). Generation stops on them."""
    turn_end = _turn_end_id(tokenizer)
    return {tokenizer.eos_token_id} | ({turn_end} if turn_end is not None else set())


# The tokens that close a chat turn, by format: ChatML (SmolLM2, Qwen), Gemma. A chat model ends its reply with it,
# not with eos, so generation must stop on it.
TURN_END_TOKENS = ("<|im_end|>", "<end_of_turn>")


def _turn_end_id(tokenizer) -> int | None:
    for token in TURN_END_TOKENS:
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            return tid
    return None


_PROBE_TOOL = {"type": "function", "function": {"name": "selfevolve_probe_tool", "description": "probe",
                                                "parameters": {"type": "object", "properties": {}}}}


def template_renders_tools(tokenizer) -> bool:
    """Whether the chat template shows the ``tools`` passed to ``apply_chat_template`` (found by rendering a
    probe schema: templates without tool support ignore the argument)."""
    try:
        probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        text = tokenizer.apply_chat_template(probe, tools=[_PROBE_TOOL], tokenize=False)
    except Exception:  # noqa: BLE001 - a template that fails on tools does not support them
        return False
    return "selfevolve_probe_tool" in text


def template_has_tool_role(tokenizer) -> bool:
    """Whether the chat template treats ``tool`` messages specially. Generic templates (SmolLM2's) print any
    role name verbatim, so rendering cannot tell; the template source naming the role can."""
    source = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(source, dict):
        source = " ".join(source.values())
    return "'tool'" in source or '"tool"' in source


def render_chat(tokenizer, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """Token ids of ``messages`` in the model's chat template, ending with the assistant's turn opening.

    Message contents are text, never control tokens: one holding ``<|im_end|>`` or another special token's
    string is encoded literally (``agent/special_tokens.py``), so no message can forge a turn."""
    if any(holds_special(tokenizer, m.get("content")) for m in messages):
        return encode_rendered(tokenizer, lambda msgs: tokenizer.apply_chat_template(
            msgs, tools=tools, add_generation_prompt=True, tokenize=False), messages)
    out = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    if hasattr(out, "keys"):  # transformers 5 returns a BatchEncoding
        out = out["input_ids"]
    return list(out)
