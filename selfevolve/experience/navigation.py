"""AgentEvolver self-navigating (seed 004, ``shared/design/methods.md`` §7): experience-guided rollouts.

- **Extraction**: after a training step, an LLM reads each task group's attempts — a success and a failure
  side by side when the group has both (a contrast), else the successes or the failures — and writes 1–3
  insights ``{"when_to_use": ..., "content": ...}`` as JSON. Replies that are not such JSON are counted
  (``experience/malformed``) and skipped. Insights are validated (:func:`valid_insight`) and deduplicated: one
  whose ``when_to_use`` has cosine > ``experience.dedup`` (0.5) with a kept one is dropped.
- **Retrieval**: per task, the top ``insights_k`` (3) insights by cosine between the request and their
  ``when_to_use``; shown as a block in the system prompt.
- **Mixing**: of a task's G rollouts, round(G·η) carry the block (η = 0.5; half rounds up).
- **Stripping**: the training sample of a guided rollout is its prompt *without* the block, built by the prompt
  builder (a twin context advanced in lockstep, ``agent/context.py``) — never by editing decoded text.
- **Old log-probs**: sampled with the block, so they belong to another context. ``sampled`` keeps them (the
  off-policy reading of AgentEvolver); ``recompute`` replaces them by the current policy's log-probs on the
  stripped prompt before the update. Either way the drift exp(logπ_stripped − logπ_sampled) is measured.
- **Selective boosting**: guided rows get the upper clip 1 + 0.6 instead of 1 + ``algo.clip_high``; it binds
  only where A > 0.
"""

from __future__ import annotations

import numpy as np

from selfevolve.experience.pool import NewItem
from selfevolve.lexical import jaccard
from selfevolve.models.llm import parse_json_list

EXTRACT_SYSTEM = (
    "You review an agent's attempts at a task and write down experience that helps with similar tasks. Answer "
    'with a JSON list of 1 to 3 objects, each {"when_to_use": "the situation it applies to", "content": "what '
    'to do"}, and nothing else.'
)
# One worked exchange (a made-up task of no built-in world): small models copy the format of an example far
# more reliably than they follow a description of it (SmolLM2-135M wrote no JSON at all without it).
EXTRACT_EXAMPLE = (
    {"role": "user", "content": "Task: Book a table for two at 7 pm.\n\nA successful attempt:\nRequest: Book a "
     "table for two at 7 pm.\nAction: check_availability(time=19:00)\nResult: free\nAction: book(time=19:00, "
     "people=2)\nResult: booked\n\nA failed attempt:\nRequest: Book a table for two at 7 pm.\nAction: book("
     "time=19:00)\nResult: Error: people is required\n\nWhat did the successful attempt do that the failed one "
     "did not?"},
    {"role": "assistant", "content": '[{"when_to_use": "booking something with a tool", "content": "Check it is '
     'available first, then give every required argument of the booking call."}]'},
)
MAX_ATTEMPT_CHARS = 1500  # an attempt's text is cut to this in the extraction prompt
BLOCK_TITLE = "Experience from earlier tasks (use it where it applies):"


def guided_count(group_size: int, eta: float) -> int:
    """round(G·η) with halves rounded up (G = 3, η = 0.5 gives 2): how many of a task's rollouts are guided."""
    return int(np.floor(group_size * eta + 0.5))


def extraction_messages(query: str, successes: list[str], failures: list[str]) -> list[dict]:
    """The extraction prompt of one task group: a contrast (a success and a failure) when it has both."""

    def cut(text: str) -> str:
        return text if len(text) <= MAX_ATTEMPT_CHARS else text[:MAX_ATTEMPT_CHARS] + "…"

    parts = [f"Task: {query}"]
    if successes:
        parts.append(f"A successful attempt:\n{cut(successes[0])}")
    if failures:
        parts.append(f"A failed attempt:\n{cut(failures[0])}")
    if successes and failures:
        parts.append("What did the successful attempt do that the failed one did not?")
    elif successes:
        parts.append("What made this attempt succeed?")
    else:
        parts.append("What went wrong, and what should be done instead?")
    return [{"role": "system", "content": EXTRACT_SYSTEM}, *EXTRACT_EXAMPLE,
            {"role": "user", "content": "\n\n".join(parts)}]


def parse_insights(text: str) -> list[dict] | None:
    """The insight objects of a reply: a JSON list of objects (or one object), text around it ignored; None when
    there is no such JSON. Objects keep only string ``when_to_use`` and ``content``; at most 3."""
    data = parse_json_list(text)
    if data is None:
        return None
    out = [{"when_to_use": " ".join(d["when_to_use"].split()), "content": " ".join(d["content"].split())}
           for d in data if isinstance(d, dict) and isinstance(d.get("when_to_use"), str)
           and isinstance(d.get("content"), str)]
    return out[:3] if out else None


_EXAMPLE_INSIGHT = parse_json_list(EXTRACT_EXAMPLE[1]["content"])[0]
COPY_JACCARD = 0.6  # a part this close to the worked example's is a copy, not an insight


def valid_insight(ins: dict) -> bool:
    """Rules an insight must pass: both parts 8–400 characters, different from each other, and neither the
    prompt's placeholder text nor the worked example's insight echoed back, word for word or nearly (word-set
    Jaccard ≥ ``COPY_JACCARD`` with either part of the example): SmolLM2-135M copied the example's "booking"
    insight into FrozenLake runs, and later paraphrased it with one word swapped ("... of the game call")."""
    w, c = ins["when_to_use"], ins["content"]
    if not (8 <= len(w) <= 400 and 8 <= len(c) <= 400) or w.casefold() == c.casefold():
        return False
    if any(jaccard(part, ex) >= COPY_JACCARD for part in (w, c) for ex in _EXAMPLE_INSIGHT.values()):
        return False
    return "the situation it applies to" not in w.casefold() and "what to do" != c.casefold().strip(" .")


def novel(vectors: np.ndarray, kept: np.ndarray, threshold: float) -> list[bool]:
    """Which new insights (unit ``vectors`` of their when_to_use) are not duplicates: cosine ≤ ``threshold``
    with every kept one and with every earlier new one that survived."""
    out, accepted = [], [kept] if len(kept) else []
    for v in vectors:
        ref = np.concatenate(accepted) if accepted else np.zeros((0, len(v)), np.float32)
        ok = not len(ref) or float((ref @ v).max()) <= threshold
        out.append(ok)
        if ok:
            accepted.append(v[None])
    return out


def experience_block(contents: list[tuple[str, str]]) -> str:
    """The system-prompt block of (when_to_use, content) insights."""
    if not contents:
        return ""
    return "\n".join([BLOCK_TITLE, *(f"- When {w.rstrip('.')}: {c}" for w, c in contents)])


def retrieve(pool, query_vectors: np.ndarray, k: int) -> list[list]:
    """Top-k insights per query by cosine with their when_to_use (the key embedding)."""
    items = pool.items("insight")
    if not items:
        return [[] for _ in range(len(query_vectors))]
    keys = pool.matrix("insight", key=True)
    out = []
    for q in query_vectors:
        s = keys @ q
        out.append([items[j] for j in sorted(range(len(items)), key=lambda j: (-float(s[j]), j))[:k]])
    return out


def extract(llm, pool, groups: list[tuple[str, list[str], list[str]]], step: int, dedup: float
            ) -> dict[str, float]:
    """Ask ``llm`` for insights on each group ``(query, success texts, failure texts)``, validate, deduplicate
    and add the survivors to ``pool`` at ``step``. Returns counts."""
    if not groups:
        return {}
    replies = llm.chat([extraction_messages(*g) for g in groups], purpose="extract")
    parsed, malformed, invalid = [], 0, 0
    for (query, succ, fail), reply in zip(groups, replies):
        found = parse_insights(reply)
        if found is None:
            malformed += 1
            continue
        for ins in found:
            if valid_insight(ins):
                parsed.append((ins, query, bool(succ), bool(fail)))
            else:
                invalid += 1
    added = 0
    if parsed:
        vecs = pool.embedder.encode([p[0]["when_to_use"] for p in parsed])
        keep = novel(vecs, pool.matrix("insight", key=True), dedup)
        new = [NewItem(kind="insight", text=ins["content"], key_text=ins["when_to_use"],
                       info={"query": q, "from": "contrast" if s and f else "success" if s else "failure"})
               for (ins, q, s, f), k in zip(parsed, keep) if k]
        added = len(pool.add(new, step=step, origin="extracted"))
    return {"experience/extract_calls": len(groups), "experience/malformed": malformed,
            "experience/insights_invalid": invalid, "experience/insights_added": added}


def prepare_guided_rows(rows, logprobs_of, mode: str, boost: float) -> dict[str, float]:
    """Guided rows: measure the ratio drift of their old log-probs, restate them when ``mode="recompute"``, and
    set their upper clip to ``boost`` (selective boosting). Unguided rows are left alone.

    ``rows``: what the objective trains on (token rows, or Self-AC's shadow episodes), each with ``guided``,
    ``clip_high`` and ``old_logprobs`` (one per generated token); ``logprobs_of(rows)``: the current policy's
    log-probs of their generated tokens on their (stripped) prompts, one list per row — the objective's own
    ``current_logprobs``, so the ratio is restated in the forward its update uses."""
    guided = [r for r in rows if r.guided]
    for r in guided:
        r.clip_high = boost
    if not guided:
        return {}
    new = logprobs_of(guided)
    log_ratio = np.array([a - b for r, lp in zip(guided, new) for a, b in zip(lp, r.old_logprobs)])
    if mode == "recompute":
        for r, lp in zip(guided, new):
            r.old_logprobs = list(lp)
    return {"experience/ratio_drift": float(np.abs(np.exp(log_ratio) - 1).mean()) if len(log_ratio) else 0.0,
            "experience/log_ratio_mean": float(log_ratio.mean()) if len(log_ratio) else 0.0,
            "experience/guided_tokens": float(len(log_ratio))}
