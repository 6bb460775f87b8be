"""Intent of a request: an LLM picks one of the environment's declared intents (SEER's s3 compares them).

The tool worlds declare their intents (``ShopEnv.intents``: ``order_status``, ``cancel_order``, ...). The
classifier shows the model the list and the request and reads the first intent name in its reply (written
with underscores or spaces, any case). A reply naming none is malformed: the intent stays unknown (s3 = 0)
and is counted, never an error. Accuracy against the tasks' true intents is reported as ``experience/
intent_accuracy``.
"""

from __future__ import annotations

import re

SYSTEM = "You sort a user's request into exactly one category. Answer with the category name only."


def intent_messages(query: str, intents: list[str]) -> list[dict]:
    listing = "\n".join(f"- {i}" for i in intents)
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Categories:\n{listing}\n\nRequest: {query}\n\nCategory:"}]


def parse_intent(text: str, intents: list[str]) -> str | None:
    """The intent named first in ``text`` (underscores or spaces, case-insensitive), else None."""
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
