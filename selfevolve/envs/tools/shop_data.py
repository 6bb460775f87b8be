"""The shop's database: schema, a seeded generator of its rows, and the built SQLite image.

Why generated: the benchmarks this world imitates (tau-bench) ship their data as downloads; here every row
comes from ``random.Random(f"shop-{seed}")`` and hand-written lists below, so the same seed always gives the
same database, byte for byte, with nothing to fetch. The database is built once per seed into memory and
kept as its serialised image (:func:`database_image`); every episode deserialises its own copy.

Money is stored in integer cents (no float drift in totals and refunds); tools show dollars.
"""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

SCHEMA = """
CREATE TABLE users (
    id TEXT PRIMARY KEY, first_name TEXT NOT NULL, last_name TEXT NOT NULL,
    email TEXT NOT NULL UNIQUE COLLATE NOCASE, zip TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE payment_methods (
    id TEXT PRIMARY KEY, user_id TEXT NOT NULL REFERENCES users(id), kind TEXT NOT NULL,
    description TEXT NOT NULL);
CREATE TABLE products (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, category TEXT NOT NULL);
CREATE TABLE variants (
    id TEXT PRIMARY KEY, product_id TEXT NOT NULL REFERENCES products(id), options TEXT NOT NULL,
    price_cents INTEGER NOT NULL, stock INTEGER NOT NULL CHECK (stock >= 0));
CREATE TABLE orders (
    id TEXT PRIMARY KEY, user_id TEXT NOT NULL REFERENCES users(id),
    status TEXT NOT NULL CHECK (status IN ('pending', 'processed', 'delivered', 'cancelled')),
    created TEXT NOT NULL, payment_method_id TEXT NOT NULL REFERENCES payment_methods(id),
    total_cents INTEGER NOT NULL, cancel_reason TEXT);
CREATE TABLE order_items (
    id TEXT PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(id),
    variant_id TEXT NOT NULL REFERENCES variants(id), price_cents INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ordered', 'returned', 'exchanged')),
    new_variant_id TEXT REFERENCES variants(id));
CREATE TABLE payments (
    id TEXT PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(id),
    payment_method_id TEXT NOT NULL REFERENCES payment_methods(id), kind TEXT NOT NULL,
    amount_cents INTEGER NOT NULL);
CREATE INDEX orders_by_user ON orders(user_id);
CREATE INDEX items_by_order ON order_items(order_id);
CREATE INDEX variants_by_product ON variants(product_id);
CREATE INDEX payments_by_order ON payments(order_id);
CREATE INDEX users_by_name ON users(last_name, first_name, zip);
"""

TABLES = ("users", "payment_methods", "products", "variants", "orders", "order_items", "payments")


def _change_log() -> str:
    """A ``_touched`` table and triggers that record the id of every row inserted, updated or deleted.

    Why: checking a goal compares the rows an episode changed with the start; the database itself keeps the
    list, so a tool that forgets to report a write cannot fool the check, and the comparison costs O(changes)
    instead of a scan of every table. The log is part of the database image, so snapshots include it.
    """
    sql = ["CREATE TABLE _touched (tbl TEXT NOT NULL, pk TEXT NOT NULL, PRIMARY KEY (tbl, pk)) WITHOUT ROWID;"]
    for t in TABLES:
        for event, refs in (("INSERT", ["NEW"]), ("UPDATE", ["OLD", "NEW"]), ("DELETE", ["OLD"])):
            body = " ".join(f"INSERT OR IGNORE INTO _touched VALUES ('{t}', {r}.id);" for r in refs)
            sql.append(f"CREATE TRIGGER {t}_{event.lower()} AFTER {event} ON {t} BEGIN {body} END;")
    return "\n".join(sql)
STATUSES = ("pending", "processed", "delivered", "cancelled")
CANCEL_REASONS = ("no longer needed", "ordered by mistake")

# name, category, base price in dollars, {attribute: values}. Option values are unique within a product, so a
# colour or a size alone names an option.
CATALOGUE: list[tuple[str, str, int, dict[str, list[str]]]] = [
    ("Trail Backpack", "bags", 79, {"colour": ["green", "black", "grey"], "capacity": ["20L", "30L"]}),
    ("Running Shoes", "shoes", 95, {"colour": ["white", "black", "blue"], "size": ["8", "9", "10", "11"]}),
    ("Cotton T-Shirt", "clothing", 19, {"colour": ["white", "navy", "red"], "size": ["S", "M", "L", "XL"]}),
    ("Rain Jacket", "clothing", 120, {"colour": ["yellow", "navy", "olive"], "size": ["S", "M", "L"]}),
    ("Desk Lamp", "home", 45, {"colour": ["black", "white", "brass"], "bulb": ["LED", "halogen"]}),
    ("Water Bottle", "outdoor", 18, {"capacity": ["500ml", "750ml", "1L"], "material": ["steel", "plastic"]}),
    ("Wireless Headphones", "electronics", 150, {"colour": ["black", "silver", "blue"],
                                                 "style": ["over-ear", "in-ear"]}),
    ("Coffee Grinder", "kitchen", 60, {"type": ["manual", "electric"], "finish": ["black", "steel"]}),
    ("Yoga Mat", "sports", 30, {"colour": ["purple", "green", "grey"], "thickness": ["4mm", "6mm"]}),
    ("Smart Watch", "electronics", 220, {"colour": ["black", "rose gold", "silver"],
                                         "band": ["leather", "silicone"]}),
    ("Camping Tent", "outdoor", 180, {"capacity": ["2-person", "4-person"], "colour": ["green", "orange"]}),
    ("Wool Socks", "clothing", 12, {"colour": ["grey", "black", "cream"], "size": ["M", "L"]}),
    ("Bluetooth Speaker", "electronics", 70, {"colour": ["black", "red", "teal"], "size": ["mini", "standard"]}),
    ("Chef Knife", "kitchen", 55, {"length": ["6 inch", "8 inch"], "handle": ["wood", "steel"]}),
    ("Office Chair", "home", 240, {"colour": ["black", "grey"], "armrests": ["fixed", "adjustable"]}),
    ("Sunglasses", "accessories", 65, {"frame": ["black", "tortoise", "gold"], "lens": ["polarized", "standard"]}),
    ("Bicycle Helmet", "sports", 75, {"colour": ["white", "black", "red"], "size": ["S", "M", "L"]}),
    ("Notebook Set", "office", 15, {"paper": ["lined", "dotted", "blank"], "cover": ["soft", "hard"]}),
]

FIRST_NAMES = [
    "Ana", "Ben", "Chloe", "Daniel", "Elena", "Farid", "Grace", "Hiro", "Isabel", "Jonas", "Kira", "Liam",
    "Maya", "Nikolai", "Olivia", "Pedro", "Quinn", "Rosa", "Samir", "Tara", "Umar", "Vera", "Wei", "Ximena",
    "Yusuf", "Zoe", "Amara", "Bruno", "Clara", "Dev",
]
LAST_NAMES = [
    "Silva", "Okafor", "Nguyen", "Schmidt", "Rossi", "Haddad", "Kim", "Tanaka", "Garcia", "Larsen", "Patel",
    "Murphy", "Cohen", "Ivanova", "Moreau", "Santos", "Reyes", "Novak", "Ahmed", "Walsh", "Fischer", "Costa",
]
CITIES = [
    ("Boston", "02108"), ("Austin", "78701"), ("Denver", "80202"), ("Seattle", "98101"), ("Chicago", "60601"),
    ("Portland", "97201"), ("Miami", "33101"), ("Phoenix", "85001"), ("Atlanta", "30303"),
    ("San Diego", "92101"), ("Columbus", "43215"), ("Madison", "53703"),
]
CARDS = ("visa", "mastercard", "amex")


@dataclass(frozen=True)
class ShopData:
    """The generated rows, table by table (each a list of dicts in column order)."""

    rows: dict[str, list[dict[str, Any]]]

    def table(self, name: str) -> list[dict[str, Any]]:
        return self.rows[name]

    def by_id(self, name: str) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in self.rows[name]}


def option_text(options: dict[str, str]) -> str:
    """'green, 30L': a variant's option values in attribute order, as a customer would say them."""
    return ", ".join(options.values())


def generate(seed: int = 0, n_users: int = 150) -> ShopData:
    """All rows of the shop from ``seed``: products and variants, users with payment methods, and their orders
    (with items and the payments that go with them)."""
    rng = random.Random(f"shop-{seed}")
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    variants_of: dict[str, list[dict[str, Any]]] = {}
    for i, (name, category, base, attributes) in enumerate(CATALOGUE, start=1):
        pid = f"P{i:02d}"
        rows["products"].append({"id": pid, "name": name, "category": category})
        combos = list(itertools.product(*attributes.values()))
        keep = sorted(rng.sample(range(len(combos)), k=max(3, min(len(combos), rng.randint(4, 7)))))
        extra = {v: rng.choice([0, 0, 5, 10, 15]) for values in attributes.values() for v in values}
        variants_of[pid] = []
        for k, combo in enumerate((combos[j] for j in keep), start=1):
            price = base * 100 + sum(extra[v] for v in combo) * 100 - rng.choice([0, 1, 1, 5, 50])
            stock = 0 if rng.random() < 0.15 else rng.randint(1, 20)
            variant = {"id": f"{pid}-{k}", "product_id": pid, "options": json.dumps(dict(zip(attributes, combo))),
                       "price_cents": price, "stock": stock}
            rows["variants"].append(variant)
            variants_of[pid].append(variant)

    people: set[tuple[str, str, str]] = set()
    emails: set[str] = set()
    method_no = itertools.count(1)
    for u in range(1, n_users + 1):
        while True:
            first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
            city, zip_code = rng.choice(CITIES)
            email = f"{first}.{last}{rng.randint(10, 99)}@example.com".lower()
            if (first, last, zip_code) not in people and email not in emails:
                break
        people.add((first, last, zip_code))
        emails.add(email)
        uid = f"U{u:03d}"
        rows["users"].append({"id": uid, "first_name": first, "last_name": last, "email": email, "zip": zip_code,
                              "city": city})
        kinds = rng.sample(["credit_card", "credit_card", "paypal", "gift_card"], k=rng.choice([1, 1, 2]))
        for kind in dict.fromkeys(kinds):
            description = {"credit_card": f"{rng.choice(CARDS)} ending in {rng.randint(1000, 9999)}",
                           "paypal": f"paypal {email}", "gift_card": "gift card"}[kind]
            rows["payment_methods"].append({"id": f"PM{next(method_no):04d}", "user_id": uid, "kind": kind,
                                            "description": description})

    methods_of: dict[str, list[str]] = {}
    for m in rows["payment_methods"]:
        methods_of.setdefault(m["user_id"], []).append(m["id"])
    plans = [(user["id"], rng.choices(STATUSES, weights=(30, 15, 45, 10))[0])
             for user in rows["users"] for _ in range(rng.randint(1, 4))]
    order_ids = rng.sample(range(1000, 10000), k=len(plans))  # order numbers say nothing about their owner
    for (uid, status), number in zip(plans, order_ids):
        oid = f"W{number}"
        method = rng.choice(methods_of[uid])
        items = []
        for n, pid in enumerate(rng.sample(sorted(variants_of), k=rng.choice([1, 1, 2, 2, 3, 4])), start=1):
            variant = rng.choice(variants_of[pid])  # items of one order are distinct products
            items.append({"id": f"{oid}-{n}", "order_id": oid, "variant_id": variant["id"],
                          "price_cents": variant["price_cents"], "status": "ordered", "new_variant_id": None})
        total = sum(i["price_cents"] for i in items)
        created = f"2024-{rng.randint(1, 6):02d}-{rng.randint(1, 28):02d}"
        reason = rng.choice(CANCEL_REASONS) if status == "cancelled" else None
        rows["orders"].append({"id": oid, "user_id": uid, "status": status, "created": created,
                               "payment_method_id": method, "total_cents": total, "cancel_reason": reason})
        rows["order_items"].extend(items)
        rows["payments"].append({"id": f"{oid}-purchase", "order_id": oid, "payment_method_id": method,
                                 "kind": "purchase", "amount_cents": total})
        if status == "cancelled":
            rows["payments"].append({"id": f"{oid}-cancel", "order_id": oid, "payment_method_id": method,
                                     "kind": "refund", "amount_cents": -total})
    rows["orders"].sort(key=lambda r: r["id"])
    return ShopData(rows)


def build(data: ShopData) -> sqlite3.Connection:
    """A new in-memory database holding ``data``."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.executescript(SCHEMA)
    for table in TABLES:
        rows = data.rows[table]
        if rows:
            columns = list(rows[0])
            sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
            conn.executemany(sql, [tuple(r[c] for c in columns) for r in rows])
    conn.executescript(_change_log())  # after the data: the log starts empty
    conn.commit()
    return conn


@lru_cache(maxsize=8)
def dataset(seed: int = 0) -> ShopData:
    return generate(seed)


@lru_cache(maxsize=8)
def database_image(seed: int = 0) -> bytes:
    """The serialised database of ``seed`` (built once per process): what every episode starts from."""
    conn = build(dataset(seed))
    try:
        return conn.serialize()
    finally:
        conn.close()


def table_rows(conn: sqlite3.Connection) -> dict[str, dict[str, tuple]]:
    """Every row of every table, keyed by table and primary key (for comparing database states)."""
    return {t: {r[0]: r for r in conn.execute(f"SELECT * FROM {t}")} for t in TABLES}


@lru_cache(maxsize=8)
def base_rows(seed: int = 0) -> dict[str, dict[str, tuple]]:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(database_image(seed))
    try:
        return table_rows(conn)
    finally:
        conn.close()


def columns(table: str) -> list[str]:
    """The column names of a table, from the schema itself."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(SCHEMA)
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def changes(conn: sqlite3.Connection, seed: int = 0) -> dict[str, dict[str, dict[str, Any] | None]]:
    """How a database differs from the seed's start: ``{table: {id: row as a dict, or None if deleted}}``
    for every row whose content differs (tables without changes left out; a row changed and changed back is
    no change). JSON-serialisable, so it can be stored as a task's goal."""
    base = base_rows(seed)
    out: dict[str, dict[str, dict[str, Any] | None]] = {}
    for table, pk in conn.execute("SELECT tbl, pk FROM _touched ORDER BY tbl, pk").fetchall():
        if table not in TABLES:  # only the triggers write the log; a table name is never taken from elsewhere
            raise ValueError(f"unexpected table {table!r} in the change log")
        found = conn.execute(f"SELECT * FROM {table} WHERE id = ?", (pk,)).fetchall()  # never leave it open
        row = found[0] if found else None
        if row != base[table].get(pk):
            out.setdefault(table, {})[pk] = None if row is None else dict(zip(_columns(table), row))
    return {t: out[t] for t in TABLES if t in out}


def changes_by_scan(conn: sqlite3.Connection, seed: int = 0) -> dict[str, dict[str, dict[str, Any] | None]]:
    """:func:`changes` computed by comparing every row (slow; a cross-check of the trigger log in tests)."""
    base, now = base_rows(seed), table_rows(conn)
    out: dict[str, dict[str, dict[str, Any] | None]] = {}
    for table in TABLES:
        names = _columns(table)
        diff = {pk: dict(zip(names, row)) for pk, row in now[table].items() if base[table].get(pk) != row}
        diff.update({pk: None for pk in base[table] if pk not in now[table]})
        if diff:
            out[table] = dict(sorted(diff.items()))
    return out


@lru_cache(maxsize=None)
def _columns(table: str) -> tuple[str, ...]:
    return tuple(columns(table))
