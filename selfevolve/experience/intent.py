"""Intent of a request: an LLM picks one of the environment's declared intents (SEER's s3 compares them).

The tool worlds declare their intents (``ShopEnv.intents``: ``order_status``, ``cancel_order``, ...). The
classifier shows the model the list and the request and reads the first intent name in its reply (written
with underscores or spaces, any case). A reply naming none is malformed: the intent stays unknown (s3 = 0)
and is counted, never an error. Accuracy against the tasks' true intents is reported as ``experience/
intent_accuracy``.
"""

from __future__ import annotations

import re

from selfevolve.untrusted import too_long

SYSTEM = "You sort a user's request into exactly one category. Answer with the category name only."
# Two worked exchanges over made-up categories (no built-in world's): SmolLM2-135M named the right intent of
# 32 held-out requests 6 times without them and 12 (shop) / 14 (tables) times with them, and named no category
# at all far less often (docs/benchmarks.md, "Experience").
EXAMPLES = (("Please cancel my reservation for Friday, booking R-221.", "cancel_booking"),
            ("When do you open on Sundays?", "opening_hours"))
EXAMPLE_INTENTS = ("opening_hours", "book_table", "cancel_booking")


def _ask(query: str, intents) -> str:
    listing = "\n".join(f"- {i}" for i in intents)
    return f"Categories:\n{listing}\n\nRequest: {query}\n\nCategory:"


def intent_messages(query: str, intents: list[str]) -> list[dict]:
    shots = [m for q, a in EXAMPLES for m in ({"role": "user", "content": _ask(q, EXAMPLE_INTENTS)},
                                               {"role": "assistant", "content": a})]
    return [{"role": "system", "content": SYSTEM}, *shots, {"role": "user", "content": _ask(query, intents)}]


def parse_intent(text: str, intents: list[str]) -> str | None:
    """The intent named first in ``text`` (underscores or spaces, case-insensitive), else None (also for a reply
    longer than ``MAX_ACTION_CHARS``: the classifier's budget is 12 tokens)."""
    if too_long(text):
        return None
    low = text.casefold()
    best, where = None, len(low) + 1
    for name in intents:
        for form in {name.casefold(), name.casefold().replace("_", " ")}:
            m = re.search(rf"(?<![a-z_]){re.escape(form)}(?![a-z_])", low)
            if m and m.start() < where:
                best, where = name, m.start()
    return best


def classify(llm, queries: list[str], intents: list[str]) -> tuple[list[str | None], int]:
    """``(intents, malformed)``: one LLM call per distinct query (batched)."""
    distinct = list(dict.fromkeys(queries))
    replies = llm.chat([intent_messages(q, intents) for q in distinct], purpose="intent", max_new_tokens=12)
    found = {q: parse_intent(r, intents) for q, r in zip(distinct, replies)}
    return [found[q] for q in queries], sum(v is None for v in found.values())


def declared_intents(env_cls) -> list[str]:
    """The environment's intent set: ``env_cls.intents`` (the tool worlds), else none."""
    return list(getattr(env_cls, "intents", ()) or ())
