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
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def messages(self, observations: list[str], actions: list[str], instruction: str = "") -> list[dict]:
        """Chat messages for the turn after ``actions`` (``len(observations) == len(actions) + 1``)."""
        assert len(observations) == len(actions) + 1, "one more observation than actions"
        system = self.instructions
        if self.think:
            system = f"{system}\n{THINK_FORMAT}"
        if instruction:
            system = f"{system}\n{instruction}"
        msgs = [{"role": "system", "content": system}]
        if self.few_shot:
            for obs, act in self.examples:
                shown = f"<think>Let me look at the board.</think><answer>{act}</answer>" if self.think else act
                msgs += [{"role": "user", "content": obs}, {"role": "assistant", "content": shown}]
        first = 0 if self.history is None else max(0, len(actions) - self.history)
        for t in range(first, len(actions)):
            msgs += [{"role": "user", "content": observations[t]}, {"role": "assistant", "content": actions[t]}]
        msgs.append({"role": "user", "content": observations[-1]})
        return msgs

    def prompt_ids(self, observations: list[str], actions: list[str], instruction: str = "") -> list[int]:
        return render_chat(self.tokenizer, self.messages(observations, actions, instruction))

    def next_prompt_ids(
        self,
        prev_prompt: list[int],
        action_ids: list[int],
        observations: list[str],
        actions: list[str],
        instruction: str = "",
    ) -> list[int]:
        """The prompt after the model answered ``action_ids`` to ``prev_prompt`` and the world showed
        ``observations[-1]``. Incremental (exact ids) for the full history, re-rendered for a window."""
        if self.history is None:
            delta = self._observation_delta(observations[-1])
            if delta is not None:
                # A reply cut by the token budget never closed its turn: close it (as prompt, not loss).
                closed = bool(action_ids) and action_ids[-1] in end_of_turn_ids(self.tokenizer)
                closing = [] if closed else [self.eot_id()]
                return list(prev_prompt) + list(action_ids) + closing + delta
        return self.prompt_ids(observations, actions, instruction)

    def eot_id(self) -> int:
        """The id that closes a chat turn (``<|im_end|>`` in ChatML, else the eos token)."""
        return _im_end_id(self.tokenizer) or self.tokenizer.eos_token_id

    def _observation_delta(self, observation: str) -> list[int] | None:
        """Template ids between the end of an assistant reply and the next assistant opening, for ``observation``.

        Found by rendering a probe chat with and without the new user message; ``None`` when the template does
        not simply append (then the caller re-renders).
        """
        tok = self.tokenizer
        base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": "a"}]
        a = tok.apply_chat_template(base, tokenize=False)
        b = tok.apply_chat_template(base + [{"role": "user", "content": observation}], tokenize=False,
                                    add_generation_prompt=True)
        eot = tok.convert_ids_to_tokens(self.eot_id())
        i = a.rfind(eot)
        if not b.startswith(a) or i < 0:
            return None
        text = a[i + len(eot):] + b[len(a):]
        return list(tok.encode(text, add_special_tokens=False))


def end_of_turn_ids(tokenizer) -> set[int]:
    """Ids that end the model's turn: eos, and ``<|im_end|>`` in ChatML models. Generation stops on them."""
    im_end = _im_end_id(tokenizer)
    return {tokenizer.eos_token_id} | ({im_end} if im_end is not None else set())


def _im_end_id(tokenizer) -> int | None:
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return im_end if isinstance(im_end, int) and im_end != tokenizer.unk_token_id else None


def render_chat(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of ``messages`` in the model's chat template, ending with the assistant's turn opening."""
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(out, "keys"):  # transformers 5 returns a BatchEncoding
        out = out["input_ids"]
    return list(out)
