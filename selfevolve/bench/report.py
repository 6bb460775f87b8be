"""The table of ``selfevolve bench``: one markdown row per game (the same figures as ``bench.json``)."""

from __future__ import annotations


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def markdown_table(report: dict) -> str:
    """The report as a markdown table, with a line saying what was compared on how many held-out tasks."""
    k = report["pass_k"]
    lead = report["columns"][0]  # "agent" or, without one, "untrained"
    who = report["agent"] or f"untrained {report['untrained']}"
    head = ["game", "held out", f"{lead} greedy"] + ([f"{lead} pass@{k}"] if k else [])
    if lead == "agent":
        head.append(f"untrained ({report['untrained']}) greedy")
    head.append("random valid")
    lines = [f"{who} on {report['episodes']} held-out tasks per game (eval seeds from {report['seed_offset']}):", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in report["rows"]:
        if "error" in row and lead not in row:
            lines.append(f"| {row['game']} | — | not run: {row['error']} |" + " |" * (len(head) - 3))
            continue
        cells = [row["game"], "yes" if row.get("held_out") else "no (one instance)"]
        first = row.get(lead, {})
        cells.append(_pct(first.get("success")))
        if k:
            cells.append(_pct(first.get("pass@k")))
        if lead == "agent":
            cells.append(_pct(row.get("untrained", {}).get("success")))
        rand = row.get("random", {})
        cells.append(_pct(rand.get("success")) if rand.get("success") is not None else f"— ({rand.get('note', 'not run')})")
        lines.append("| " + " | ".join(cells) + " |")
        if "error" in row:
            lines.append(f"| {row['game']} | | stopped: {row['error']} |" + " |" * (len(head) - 3))
    return "\n".join(lines)
