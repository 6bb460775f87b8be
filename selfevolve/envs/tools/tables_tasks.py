"""The tables world's questions, generated from the seeded tables, with exact answers and reference solutions.

Why the answers are computed here in plain Python and not by running the tools: the oracle test then checks
the tools against an independent computation (a reference solution replayed through the tools must reach
the answer computed here). Each generator yields only unambiguous questions (a unique maximum, a flight that
was not cancelled, a non-zero count, ...).

Eight intents, four easy (level 1: one table, a look-up or one aggregate) and four hard (level 2: several
aggregates and the calculator, a group-by, or two or three tables). Numbers are rounded to 2 decimals.
"""

from __future__ import annotations

import random
from collections import Counter
from functools import lru_cache
from typing import Any, Callable, Iterator

from selfevolve.envs.tools.tables_data import tables
from selfevolve.types import Task

# (level, intent) -> (train, test) number of questions
QUOTAS: dict[tuple[int, str], tuple[int, int]] = {
    (1, "flight_delay"): (22, 8), (1, "flight_count"): (22, 8), (1, "employee_attribute"): (22, 8),
    (1, "extreme_value"): (22, 8), (2, "average_difference"): (22, 8), (2, "cancellation_rate"): (22, 8),
    (2, "group_argmax"): (22, 8), (2, "cross_table"): (22, 8),
}

Rows = tuple[dict[str, Any], ...]
# A candidate: (question, expected answer, solution).
Candidate = tuple[str, str, list[dict[str, Any]]]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def load(table: str) -> dict[str, Any]:
    return call("load_table", table=table)


def where(column: str, value: Any, op: str = "==") -> dict[str, Any]:
    return call("filter_rows", column=column, op=op, value=value)


def number(x: float) -> str:
    """An expected numeric answer: integers as they are, other numbers rounded to 2 decimals."""
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def unique_top(counts: Counter) -> Any | None:
    """The most common key if it is strictly more common than the next one, else None."""
    top = counts.most_common(2)
    return top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else None


# ---------------------------------------------------------------------------------------------- easy
def flight_delay(t: dict[str, Rows], rng: random.Random) -> Iterator[Candidate]:
    for f in t["flights"]:
        if f["cancelled"] == "no" and f["delay_min"] > 0:  # "0" would be a free answer half the time
            yield (f"How many minutes was flight {f['flight_no']} delayed on {f['date']}?", number(f["delay_min"]),
                   [load("flights"), where("flight_no", f["flight_no"]), where("date", f["date"]),
                    call("get_value", column="delay_min"), call("finish", answer=number(f["delay_min"]))])


def flight_count(t: dict[str, Rows], rng: random.Random) -> Iterator[Candidate]:
    flights = t["flights"]
    for origin, dest in sorted({(f["origin"], f["dest"]) for f in flights}):
        n = sum(f["origin"] == origin and f["dest"] == dest for f in flights)
        yield (f"How many flights were scheduled from {origin} to {dest}?", number(n),
               [load("flights"), where("origin", origin), where("dest", dest), call("aggregate", function="count"),
                call("finish", answer=number(n))])
    for origin, date in sorted({(f["origin"], f["date"]) for f in flights}):
        n = sum(f["origin"] == origin and f["date"] == date for f in flights)
        yield (f"How many flights were scheduled to leave {origin} on {date}?", number(n),
               [load("flights"), where("origin", origin), where("date", date), call("aggregate", function="count"),
                call("finish", answer=number(n))])


ATTRIBUTES = {  # column: question template
    "department": "Which department does {name} work in?",
    "title": "What is {name}'s job title?",
    "city": "In which city is {name} based?",
    "hire_year": "In what year was {name} hired?",
    "manager": "Who is {name}'s manager?",
}


def employee_attribute(t: dict[str, Rows], rng: random.Random) -> Iterator[Candidate]:
    for e in t["employees"]:
        column = rng.choice([c for c in ATTRIBUTES if e[c] != ""])  # heads have no manager
        answer = str(e[column])
        yield (ATTRIBUTES[column].format(name=e["name"]), answer,
               [load("employees"), where("name", e["name"]), call("get_value", column=column),
                call("finish", answer=answer)])


def extreme_value(t: dict[str, Rows], rng: random.Random) -> Iterator[Candidate]:
    """Max / min of a column within one group: salaries by department or city, delays by airline, distances
    by origin."""
    specs = [("employees", "department", "salary", "max", "What is the highest salary in the {v} department?"),
             ("employees", "department", "salary", "min", "What is the lowest salary in the {v} department?"),
             ("employees", "city", "salary", "max", "What is the highest salary among employees in {v}?"),
             ("employees", "city", "salary", "min", "What is the lowest salary among employees in {v}?"),
             ("flights", "airline", "delay_min", "max", "What was the longest delay, in minutes, of a {v} flight?"),
             ("flights", "origin", "distance", "max", "What is the longest distance, in miles, flown from {v}?"),
             ("flights", "origin", "distance", "min", "What is the shortest distance, in miles, flown from {v}?")]
    for table, group, column, fn, text in specs:
        for v in sorted({r[group] for r in t[table]}):
            values = [r[column] for r in t[table] if r[group] == v]
            answer = number(max(values) if fn == "max" else min(values))
            yield (text.format(v=v), answer, [load(table), where(group, v),
                                              call("aggregate", function=fn, column=column),
                                              call("finish", answer=answer)])


# ---------------------------------------------------------------------------------------------- hard
def _group_means(rows: Rows, group: str, column: str) -> dict[str, float]:
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r[group], []).append(r[column])
    return {k: mean(v) for k, v in sorted(groups.items())}


def average_difference(t: dict[str, Rows], rng: random.Random) -> Iterator[Candidate]:
    """The difference of two group means: salaries by department or city, delays by airline."""
    flown = tuple(f for f in t["flights"] if f["cancelled"] == "no")
    specs = [("employees", t["employees"], "department", "salary", [],
              "On average, how much more does an employee in {a} earn than one in {b}? Round to 2 decimals."),
             ("employees", t["employees"], "city", "salary", [],
              "How much higher is the average salary of employees in {a} than in {b}? Round to 2 decimals."),
             ("flights", flown, "airline", "delay_min", [where("cancelled", "no")],
              "Among flights that were not cancelled, how many more minutes of delay did {a} flights have on "
              "average than {b} flights? Round to 2 decimals.")]
    for table, rows, group, column, filters, text in specs:
        means = _group_means(rows, group, column)
        shown = {k: round(v, 4) for k, v in means.items()}  # what the aggregate tool prints
        for a in means:
            for b in means:
                if means[a] > means[b]:
                    answer = number(round(means[a] - means[b], 2))
                    yield (text.format(a=a, b=b), answer, [
                        load(table), *filters, call("aggregate", function="mean", column=column, group_by=group),
                        call("calculate", expression=f"{shown[a]} - {shown[b]}"),
                        call("finish", answer=str(round(shown[a] - shown[b], 4)))])


def cancellation_rate(t: dict[str, Rows], rng: random.Random) -> Iterator[Candidate]:
    """The share of cancelled flights (in percent) of an airline, an origin, a destination, a date, or an
    airline from an origin."""
    flights = t["flights"]
    specs = [(("airline",), "What percentage of {0} flights were cancelled?"),
             (("origin",), "What percentage of flights from {0} were cancelled?"),
             (("dest",), "What percentage of flights to {0} were cancelled?"),
             (("date",), "What percentage of the flights on {0} were cancelled?"),
             (("airline", "origin"), "What percentage of {0} flights from {1} were cancelled?")]
    for columns, text in specs:
        for values in sorted({tuple(f[c] for c in columns) for f in flights}):
            group = [f for f in flights if all(f[c] == v for c, v in zip(columns, values))]
            n, k = len(group), sum(f["cancelled"] == "yes" for f in group)
            if k == 0:
                continue
            answer = number(round(100 * k / n, 2))
            yield (text.format(*values) + " Round to 2 decimals.", answer, [
                load("flights"), *(where(c, v) for c, v in zip(columns, values)), call("aggregate", function="count"),
                where("cancelled", "yes"), call("aggregate", function="count"),
                call("calculate", expression=f"{k} / {n} * 100"), call("finish", answer=answer)])


def group_argmax(t: dict[str, Rows], rng: random.Random) -> Iterator[Candidate]:
    """Which group is the largest within a filter (only when the largest is unique)."""
    specs = [("employees", "city", "department", "Which department has the most employees in {v}?"),
             ("employees", "department", "city", "In which city do most of the {v} department's employees work?"),
             ("flights", "origin", "airline", "Which airline has the most flights departing from {v}?"),
             ("flights", "date", "airline", "Which airline has the most flights on {v}?"),
             ("flights", "airline", "dest", "To which airport does {v} have the most flights?"),
             ("flights", "dest", "origin", "From which airport do most of the flights to {v} depart?"),
             ("flights", "date", "origin", "Which airport has the most departures on {v}?")]
    for table, where_col, group, text in specs:
        for v in sorted({r[where_col] for r in t[table]}):
            top = unique_top(Counter(r[group] for r in t[table] if r[where_col] == v))
            if top is not None:
                yield (text.format(v=v), str(top), [load(table), where(where_col, v),
                                                    call("aggregate", function="count", group_by=group),
                                                    call("finish", answer=str(top))])


def cross_table(t: dict[str, Rows], rng: random.Random) -> Iterator[Candidate]:
    """Questions that chain tables through the airports: employee -> city -> airport -> flights, and
    airport -> city -> employees."""
    code_of = {a["city"]: a["code"] for a in t["airports"]}
    for e in t["employees"]:
        code = code_of[e["city"]]
        n = sum(f["origin"] == code for f in t["flights"])
        yield (f"How many flights were scheduled to depart from the city where {e['name']} works?", number(n), [
            load("employees"), where("name", e["name"]), call("get_value", column="city"), load("airports"),
            where("city", e["city"]), call("get_value", column="code"), load("flights"), where("origin", code),
            call("aggregate", function="count"), call("finish", answer=number(n))])
    for a in t["airports"]:
        salaries = [e["salary"] for e in t["employees"] if e["city"] == a["city"]]
        if salaries:
            answer = number(round(mean(salaries), 2))
            yield (f"What is the average salary of the employees based in the city served by airport {a['code']}? "
                   "Round to 2 decimals.", answer, [
                       load("airports"), where("code", a["code"]), call("get_value", column="city"),
                       load("employees"), where("city", a["city"]),
                       call("aggregate", function="mean", column="salary"),
                       call("finish", answer=str(round(mean(salaries), 4)))])


GENERATORS: dict[tuple[int, str], Callable[[dict[str, Rows], random.Random], Iterator[Candidate]]] = {
    (1, "flight_delay"): flight_delay, (1, "flight_count"): flight_count,
    (1, "employee_attribute"): employee_attribute, (1, "extreme_value"): extreme_value,
    (2, "average_difference"): average_difference, (2, "cancellation_rate"): cancellation_rate,
    (2, "group_argmax"): group_argmax, (2, "cross_table"): cross_table,
}


@lru_cache(maxsize=4)
def generate_tasks(seed: int = 0) -> tuple[Task, ...]:
    """All questions for table ``seed``: per intent, shuffled candidates, the first ones to test, the next to
    train (the quotas of :data:`QUOTAS`); deterministic."""
    t = tables(seed)
    out: list[Task] = []
    for (level, intent), generator in GENERATORS.items():
        rng = random.Random(f"tables-tasks-{seed}-{intent}")
        candidates = list({c[0]: c for c in generator(t, rng)}.values())  # one task per question text
        rng.shuffle(candidates)
        train, test = QUOTAS[(level, intent)]
        if len(candidates) < train + test:
            raise RuntimeError(f"tables seed {seed}: only {len(candidates)} questions for {intent}")
        for split, chosen in (("test", candidates[:test]), ("train", candidates[test:test + train])):
            for k, (question, answer, solution) in enumerate(chosen):
                out.append(Task(f"tables-{split}-{level}-{intent}-{k:03d}", split=split, level=level,
                                intent=intent, instruction=question, goal={"answer": answer}, solution=solution))
    return tuple(out)
