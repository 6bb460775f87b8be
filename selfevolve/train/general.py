"""What training does to the rest of the model: a fixed set of general questions, scored before and after.

Training a LoRA adapter on one game moves the model away from everything else it knew: after the default run,
"What is the capital of France?" got a stream of French place names where the base model answers "The capital of
France is Paris." These 20 questions were written once, with the answers they accept, and kept because the
untrained SmolLM2-135M-Instruct answers every one of them correctly (greedy, 32 tokens; 10 other candidates it
got wrong were dropped). A question counts as answered when the reply contains one of its accepted answers
(case-folded). ``selfevolve eval RUN --general`` scores a run beside its base model; ``eval.general=true`` adds
``eval/general`` to every evaluation.
"""

from __future__ import annotations

QUESTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("What is the capital of France?", ("paris",)),
    ("What is the capital of Japan?", ("tokyo",)),
    ("What is the capital of Germany?", ("berlin",)),
    ("What is the capital of the United Kingdom?", ("london",)),
    ("What is the capital of Canada?", ("ottawa",)),
    ("Which planet is known as the Red Planet?", ("mars",)),
    ("What is the chemical symbol for water?", ("h2o", "h₂o")),
    ("How many days are there in a week?", ("seven", "7")),
    ("What is 2 + 2?", ("4", "four")),
    ("What color is the sky on a clear day?", ("blue",)),
    ("What gas do plants absorb from the air?", ("carbon dioxide", "co2")),
    ("Who wrote Romeo and Juliet?", ("shakespeare",)),
    ("What is the boiling point of water in Celsius?", ("100",)),
    ("What is the largest ocean on Earth?", ("pacific",)),
    ("What language is spoken in Brazil?", ("portuguese",)),
    ("What is the opposite of hot?", ("cold",)),
    ("Which star is at the center of our solar system?", ("sun",)),
    ("How many hours are in a day?", ("24", "twenty-four")),
    ("Who painted the Mona Lisa?", ("leonardo", "da vinci")),
    ("What is the main language spoken in the United States?", ("english",)),
)
MAX_NEW_TOKENS = 32


def answered(reply: str, accepted: tuple[str, ...]) -> bool:
    """Whether ``reply`` contains one of the accepted answers, case-folded."""
    text = reply.casefold()
    return any(a.casefold() in text for a in accepted)


def general_knowledge(policy, base: bool = False) -> dict:
    """Greedy replies to :data:`QUESTIONS` from ``policy`` (with ``base``: its base model, the adapter off):
    ``{"correct": fraction, "replies": [{"question", "reply", "correct"}, ...]}``."""
    from selfevolve.models.llm import LLM

    llm = LLM("base" if base else "policy", policy, max_new_tokens=MAX_NEW_TOKENS)
    replies = llm.chat([[{"role": "user", "content": q}] for q, _ in QUESTIONS], purpose="general")
    rows = [{"question": q, "reply": r, "correct": answered(r, a)} for (q, a), r in zip(QUESTIONS, replies)]
    return {"correct": sum(r["correct"] for r in rows) / len(rows), "replies": rows}
