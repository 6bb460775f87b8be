"""The tables world's data: flights, a company directory and airports, generated from a seed.

Why generated: ToolQA's tables (flights, a company's staff) are downloads; these are small look-alikes built
from ``random.Random(f"tables-{seed}")`` and the lists below, so the same seed gives the same rows and every
question's answer can be computed exactly. Employees work in the cities the airports serve, which lets
questions cross from one table to another ("flights from the city where X works").
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

AIRPORTS = [  # code, city, state
    ("BOS", "Boston", "MA"), ("JFK", "New York", "NY"), ("ORD", "Chicago", "IL"), ("SFO", "San Francisco", "CA"),
    ("SEA", "Seattle", "WA"), ("DEN", "Denver", "CO"), ("ATL", "Atlanta", "GA"), ("AUS", "Austin", "TX"),
    ("MIA", "Miami", "FL"),
]
AIRLINES = [("Aerolux", "AX"), ("BlueJet", "BJ"), ("Nimbus Air", "NM"), ("Polar Wings", "PW"), ("Coastal", "CL")]
DATES = [f"2024-03-{d:02d}" for d in range(1, 15)]
DEPARTMENTS = {  # department: (base salary, titles from junior to senior)
    "Engineering": (98000, ("Engineer", "Senior Engineer", "Staff Engineer")),
    "Sales": (72000, ("Sales Representative", "Account Executive", "Sales Director")),
    "Marketing": (70000, ("Marketing Specialist", "Marketing Manager", "Brand Director")),
    "Finance": (80000, ("Analyst", "Senior Analyst", "Controller")),
    "Support": (56000, ("Support Agent", "Support Lead", "Support Manager")),
    "People": (65000, ("Recruiter", "HR Partner", "People Director")),
}
FIRST = ["Alice", "Bruno", "Carmen", "Dmitri", "Esther", "Felix", "Gloria", "Hassan", "Ingrid", "Jamal", "Keiko",
         "Lorenzo", "Mona", "Nils", "Oksana", "Pablo", "Rina", "Stefan", "Talia", "Victor", "Wanda", "Yara"]
LAST = ["Abbott", "Brandt", "Castillo", "Dubois", "Eriksen", "Fontaine", "Greco", "Holm", "Iqbal", "Jansen",
        "Kowalski", "Lindqvist", "Mendes", "Nakamura", "Ortega", "Petrov", "Quinlan", "Richter", "Sato", "Varga"]

TABLES = ("flights", "employees", "airports")


def _distances(rng: random.Random) -> dict[tuple[str, str], int]:
    """A symmetric distance in miles between every two airports."""
    out: dict[tuple[str, str], int] = {}
    codes = [a[0] for a in AIRPORTS]
    for i, a in enumerate(codes):
        for b in codes[i + 1:]:
            out[(a, b)] = out[(b, a)] = rng.randrange(180, 2800, 10)
    return out


def flights(rng: random.Random) -> list[dict[str, Any]]:
    """About 300 flights: 36 routes (airline, origin, destination, fixed number and departure time), each flown
    on a random 40-80% of 14 days, with delays and a few cancellations. Every airport has departures."""
    distance = _distances(rng)
    codes = [a[0] for a in AIRPORTS]
    routes: list[tuple[str, str, str, str, str]] = []
    numbers: set[str] = set()
    while len(routes) < 36:
        airline, code = rng.choice(AIRLINES)
        origin = codes[len(routes) % len(codes)] if len(routes) < 2 * len(codes) else rng.choice(codes)
        dest = rng.choice([c for c in codes if c != origin])  # every airport has at least two routes out
        number = f"{code}{rng.randint(100, 999)}"
        if number in numbers or any(r[0] == airline and r[1:3] == (origin, dest) for r in routes):
            continue
        numbers.add(number)
        routes.append((airline, origin, dest, number, f"{rng.randint(6, 21):02d}:{rng.randrange(0, 60, 5):02d}"))
    rows = []
    for airline, origin, dest, number, dep in routes:
        share = rng.uniform(0.4, 0.8)
        for date in DATES:
            if rng.random() > share:
                continue
            cancelled = rng.random() < 0.06
            delay = 0 if cancelled or rng.random() < 0.5 else int(rng.expovariate(1 / 35)) + 1
            rows.append({"date": date, "flight_no": number, "airline": airline, "origin": origin, "dest": dest,
                         "dep_time": dep, "duration_min": distance[(origin, dest)] // 8 + 30,
                         "distance": distance[(origin, dest)], "delay_min": delay,
                         "cancelled": "yes" if cancelled else "no"})
    rows.sort(key=lambda r: (r["date"], r["dep_time"], r["flight_no"]))
    return rows


def employees(rng: random.Random, n: int = 80) -> list[dict[str, Any]]:
    """``n`` employees with unique names; every department's first employee heads it (and has no manager)."""
    names: list[str] = []
    while len(names) < n:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if name not in names:
            names.append(name)
    cities = [a[1] for a in AIRPORTS]
    depts = list(DEPARTMENTS)
    heads: dict[str, str] = {}
    rows = []
    for i, name in enumerate(names, start=1):
        dept = depts[i - 1] if i <= len(depts) else rng.choice(depts)
        base, titles = DEPARTMENTS[dept]
        rank = 2 if dept not in heads else rng.choice([0, 0, 0, 1, 1])
        salary = base + rank * 22000 + rng.randrange(-8000, 12000, 500)
        rows.append({"id": f"E{i:03d}", "name": name, "department": dept, "title": titles[rank],
                     "city": rng.choice(cities), "salary": salary, "hire_year": rng.randint(2010, 2024),
                     "manager": heads.get(dept, "")})
        heads.setdefault(dept, name)
    return rows


def airports() -> list[dict[str, Any]]:
    return [{"code": c, "city": city, "state": s} for c, city, s in AIRPORTS]


@lru_cache(maxsize=8)
def tables(seed: int = 0) -> dict[str, tuple[dict[str, Any], ...]]:
    """All tables of ``seed``: name -> rows (read-only tuples of dicts; do not modify them)."""
    rng = random.Random(f"tables-{seed}")
    return {"flights": tuple(flights(rng)), "employees": tuple(employees(rng)), "airports": tuple(airports())}
