"""What the model sees each turn: a multi-turn chat rendered with the model's own chat template.

The conversation is: a system message (the environment's rules, the task's instruction), few-shot example
turns (small models need them: SmolLM2-135M gives 0/64 valid FrozenLake moves zero-shot, 31/32 with two example
turns), then the episode — observations as user messages, the model's past replies as assistant messages.
``history`` bounds how many past turns are shown (the prompt stays flat as episodes grow).

The ids returned here are exactly what the model is given; the rollout stores them as the training sample's
prompt (token-in, token-out) — nothing is re-tokenised later.
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
    history: int | None = 2
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


def render_chat(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of ``messages`` in the model's chat template, ending with the assistant's turn opening."""
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(out, "keys"):  # transformers 5 returns a BatchEncoding
        out = out["input_ids"]
    return list(out)
