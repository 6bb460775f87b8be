"""Task synthesis (AgentEvolver self-questioning, stage 2): from an exploration, an LLM writes tasks a user
could ask, each with the calls that solve it.

The writer sees the world's profile (background, operations), the task preference (how many operations a
task should take), the objectives written before (so it does not repeat them) and the exploration's calls and
results, and answers with JSON: ``[{"query", "confidence", "action_sequence": [{"name", "arguments"}, ...]}]``
where the action sequence — ending with ``finish`` — is the reference solution. One worked exchange (a made-up
library world, no built-in world's data) comes first: small models copy a shown format far more reliably
than they follow a described one; with ``questioning.writer_prefill`` the reply also starts with the list's
opening (``WRITER_OPENING``), since the 135M writer otherwise tends to go on writing the exploration's calls.
Replies without such JSON are counted and skipped (``filters.py``).

``questioning.writer=template`` is a labelled alternative for when the model writes too few usable tasks: it
phrases one verified look-up of the exploration as a question from the operation's description; it is never
used silently in place of the LLM writer.
"""

from __future__ import annotations

import json
from typing import Any

from selfevolve.models.llm import parse_json_list

WRITER_SYSTEM = (
    "You write practice tasks for an assistant that uses tools. From what an explorer found, write tasks a user "
    "could really ask, each solvable with the tools, with the exact calls that solve it. Answer with a JSON "
    'list of objects {"query": "the user\'s request", "confidence": 0.0 to 1.0, "action_sequence": [{"name": '
    '"tool", "arguments": {...}}, ..., {"name": "finish", "arguments": {"answer": "..."}}]} and nothing else. '
    "Use only values that appear in the results."
)
WRITER_EXAMPLE = (
    {"role": "user", "content": "System: a library's lending desk.\nOperations:\n- find_book(title): look a book "
     "up\n- borrow(book_id, member_id): lend a book to a member\nWrite 1 task; each should take 2 operations."
     "\n\nExploration:\n1. find_book(title=\"Dune\")\n   Result: {\"id\": \"B7\", \"title\": \"Dune\", "
     "\"copies\": 2}\n"},
    {"role": "assistant", "content": '[{"query": "How many copies of Dune does the library have?", "confidence": '
     '0.9, "action_sequence": [{"name": "find_book", "arguments": {"title": "Dune"}}, {"name": "finish", '
     '"arguments": {"answer": "2"}}]}]'},
)


EXAMPLE_QUERY = json.loads(WRITER_EXAMPLE[1]["content"])[0]["query"]  # a copy of it is a `duplicate`
WRITER_OPENING = '[{"query": "'  # questioning.writer_prefill: the reply's first characters, already in JSON


def writer_messages(profile, exploration_text: str, earlier: list[str], n: int, num_ops: int) -> list[dict]:
    """The writer's prompt for one exploration: profile, preference, earlier objectives, what was found."""
    ops = "\n".join(f"- {o.name}({', '.join(o.parameters)}): {o.description.splitlines()[0]}"
                    for o in profile.operations)
    parts = [f"System: {profile.background}", f"Operations:\n{ops}",
             f"Write {n} task{'s' if n > 1 else ''}; each should take about {num_ops} operations, the last being "
             f"finish with the answer."]
    if earlier:
        parts.append("Tasks already written (write different ones):\n" + "\n".join(f"- {q}" for q in earlier[-10:]))
    parts.append(f"Exploration:\n{exploration_text}")
    return [{"role": "system", "content": WRITER_SYSTEM}, *WRITER_EXAMPLE,
            {"role": "user", "content": "\n\n".join(parts)}]


def parse_tasks(text: str, bare_steps: bool = False) -> list[dict[str, Any]] | None:
    """The task objects of a writer's reply, or None when it holds no JSON list/object. Kept fields: ``query``
    (string), ``confidence`` (number in [0, 1], 0.5 when missing), ``action_sequence`` (the well-formed
    ``{"name", "arguments"}`` steps; with ``bare_steps`` (a game's moves) a string step such as ``"Right"``
    becomes ``{"name": "Right", "arguments": {}}``, otherwise it is dropped; may come out empty, which the
    empty-reference filter counts)."""
    data = parse_json_list(text)
    if data is None:
        return None
    out = []
    for d in data:
        if not isinstance(d.get("query"), str) or not d["query"].strip():
            continue
        conf = d.get("confidence", 0.5)
        conf = min(1.0, max(0.0, float(conf))) if isinstance(conf, (int, float)) and not isinstance(conf, bool) \
            else 0.5
        seq = d.get("action_sequence") if isinstance(d.get("action_sequence"), list) else []
        calls = [{"name": s["name"], "arguments": s.get("arguments") if isinstance(s.get("arguments"), dict) else {}}
                 if isinstance(s, dict) else {"name": s, "arguments": {}}
                 for s in seq if isinstance(s, dict) and isinstance(s.get("name"), str)
                 or bare_steps and isinstance(s, str)]
        out.append({"query": " ".join(d["query"].split()), "confidence": conf, "action_sequence": calls})
    return out or None


def template_tasks(record, profile, writes: bool = False) -> list[dict[str, Any]]:
    """``questioning.writer=template``: for each look-up of the exploration that ran and returned a JSON object,
    one question about one of its fields, phrased from the operation's description; the reference is that call
    and ``finish`` with the field's value. With ``writes`` (``selfevolve evolve``'s hindsight tasks), each change
    that ran becomes a request too ("Please <operation> (...). What is its <field> then?"), its reference the
    call and ``finish`` with a field of its result, and its verifier the world's state after it (the shop's
    changed rows, ``ToolWorld.derived_goal``). Deterministic; no model involved."""
    ops = {o.name: o for o in profile.operations}
    out = []
    for turn in record.good_turns:
        call = json.loads(turn["call"].split("<tool_call>", 1)[-1].split("</tool_call>", 1)[0])
        op = ops.get(call["name"])
        if op is None or (op.writes and not writes):
            continue
        try:
            value = json.loads(turn["result"].split("\n", 1)[0])
        except json.JSONDecodeError:
            continue
        if not isinstance(value, dict):
            continue
        fields = [k for k, v in value.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)
                  and k not in call["arguments"] and not k.endswith("id")]
        if not fields:
            continue
        key = fields[0]
        args = ", ".join(f"{k} {v}" for k, v in call["arguments"].items())
        what = op.description.splitlines()[0].rstrip(".").lower()
        query = f"Please {what} ({args}). What is its {key.replace('_', ' ')} then?" if op.writes else \
            f"I want to {what} ({args}). What is its {key.replace('_', ' ')}?"
        out.append({"query": query,
                    "confidence": 1.0, "action_sequence": [call, {"name": "finish",
                                                                  "arguments": {"answer": value[key]}}]})
    return out
