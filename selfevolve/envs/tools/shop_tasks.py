"""The shop's tasks, generated from the seeded database: requests, intents, goals and reference solutions.

Why generated and not stored: the tasks refer to rows of the generated database (order ids, prices, stock),
so they are derived from the same seed, in the same deterministic way, the first time they are needed
(a few hundred milliseconds). Each generator picks rows that make its request unambiguous (a product that is
in exactly one of the customer's pending orders, a replacement variant that is in stock, ...), writes the
request the way a customer would, and gives the reference list of tool calls.

The goal is then *measured*, not hand-written: the reference solution is replayed on a fresh copy of the
database; every call must succeed, and the rows it changed (:func:`~selfevolve.envs.tools.shop_data.changes`)
become ``goal["changes"]``. An episode succeeds when its final database differs from the start by exactly
those rows (no more, no fewer, same values) and, for questions, the answer matches ``goal["answer"]``.

Splits are by customer: a quarter of the users (and of the variants, for product questions) are held out,
so test requests are about people and orders never seen in training.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections import Counter
from functools import lru_cache
from typing import Any, Callable, Iterator

from selfevolve.envs.tools.calls import ToolSet, format_tool_call
from selfevolve.envs.tools.shop_data import CANCEL_REASONS, ShopData, changes, database_image, dataset, option_text
from selfevolve.envs.tools.shop_tools import ShopTools
from selfevolve.types import Task

# (level, intent) -> (train, test) number of tasks
QUOTAS: dict[tuple[int, str], tuple[int, int]] = {
    (1, "order_status"): (30, 10), (1, "order_total"): (30, 10), (1, "product_price"): (30, 10),
    (2, "cancel_order"): (30, 10), (2, "return_item"): (30, 10), (2, "modify_item"): (30, 10),
    (2, "exchange_item"): (30, 10),
    (3, "order_status"): (18, 6), (3, "cancel_order"): (18, 6), (3, "return_item"): (18, 6),
    (3, "modify_item"): (18, 6), (3, "exchange_item"): (18, 6), (3, "multi_request"): (24, 8),
}
TEST_FRACTION = 0.25
REASON_WORDS = {"no longer needed": ("I no longer need it", "I don't need it anymore"),
                "ordered by mistake": ("I ordered it by mistake", "I placed it by accident")}
REASON_WORDS_PLURAL = {"no longer needed": ("I no longer need them", "I don't need them anymore"),
                       "ordered by mistake": ("I ordered them by mistake", "I placed them by accident")}


def held_out_users(seed: int = 0) -> set[str]:
    """The user ids whose requests form the test split."""
    return set(_Index(dataset(seed), seed).test_users)


@lru_cache(maxsize=4)
def held_out_marks(seed: int = 0) -> frozenset[str]:
    """What only test requests are about: the test customers' ids, emails, full names, orders and payment
    methods, and the test variants (self-questioning drops a synthesized task that mentions one)."""
    data = dataset(seed)
    ix = _Index(data, seed)
    marks = set(ix.test_users) | set(ix.test_variants)
    for u in data.table("users"):
        if u["id"] in ix.test_users:
            marks |= {u["email"], f"{u['first_name']} {u['last_name']}"}
    marks |= {o["id"] for o in data.table("orders") if o["user_id"] in ix.test_users}
    marks |= {p["id"] for p in data.table("payment_methods") if p["user_id"] in ix.test_users}
    return frozenset(marks)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


class _Index:
    """Look-ups over the generated rows that the generators need."""

    def __init__(self, data: ShopData, seed: int):
        self.users = data.by_id("users")
        self.variants = data.by_id("variants")
        self.products = data.by_id("products")
        self.orders = data.by_id("orders")
        self.items: dict[str, list[dict[str, Any]]] = {}
        for item in data.table("order_items"):
            self.items.setdefault(item["order_id"], []).append(item)
        self.orders_of: dict[str, list[dict[str, Any]]] = {}
        for order in data.table("orders"):
            self.orders_of.setdefault(order["user_id"], []).append(order)
        self.variants_of: dict[str, list[dict[str, Any]]] = {}
        for v in data.table("variants"):
            self.variants_of.setdefault(v["product_id"], []).append(v)
        split_rng = random.Random(f"shop-split-{seed}")
        users = sorted(self.users)
        split_rng.shuffle(users)
        self.test_users = set(users[: round(len(users) * TEST_FRACTION)])
        variants = sorted(self.variants)
        split_rng.shuffle(variants)
        self.test_variants = set(variants[: round(len(variants) * TEST_FRACTION)])

    def user_split(self, user_id: str) -> str:
        return "test" if user_id in self.test_users else "train"

    def product_of(self, item: dict[str, Any]) -> dict[str, Any]:
        return self.products[self.variants[item["variant_id"]]["product_id"]]

    def options(self, variant_id: str) -> str:
        return option_text(json.loads(self.variants[variant_id]["options"]))

    def alternatives(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """In-stock variants of the item's product other than its own."""
        pid = self.variants[item["variant_id"]]["product_id"]
        return [v for v in self.variants_of[pid] if v["id"] != item["variant_id"] and v["stock"] > 0]

    def orders_with(self, user_id: str, product_id: str, status: str | None) -> list[dict[str, Any]]:
        """The user's orders (of ``status``, or any) that contain ``product_id``."""
        return [o for o in self.orders_of.get(user_id, [])
                if (status is None or o["status"] == status)
                and any(self.product_of(i)["id"] == product_id for i in self.items[o["id"]])]


# A candidate: (split, instruction, expected answer or None, solution). Generators yield them in a fixed order.
Candidate = tuple[str, str, str | None, list[dict[str, Any]]]


def _identify(ix: _Index, user: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]]:
    """How the customer introduces themselves, and the call that finds their user id."""
    if rng.random() < 0.5:
        text = rng.choice([f"My email is {user['email']}.", f"Hi, this is {user['first_name']} {user['last_name']} "
                                                            f"({user['email']})."])
        return text, call("find_user_by_email", email=user["email"])
    text = rng.choice([f"Hi, I'm {user['first_name']} {user['last_name']}, zip code {user['zip']}.",
                       f"Hello, {user['first_name']} {user['last_name']} here, from {user['zip']}."])
    return text, call("find_user_by_name_zip", first_name=user["first_name"], last_name=user["last_name"],
                      zip=user["zip"])


def _money(cents: int) -> str:
    return f"{cents / 100:.2f}"


# ---------------------------------------------------------------------------------------------- level 1
def order_status_1(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    for o in ix.orders.values():
        text = rng.choice([f"Hi! What is the current status of my order {o['id']}?",
                           f"Can you check order {o['id']} for me? I'd like to know its status."])
        yield ix.user_split(o["user_id"]), text, o["status"], [call("get_order", order_id=o["id"]),
                                                               call("finish", answer=o["status"])]


def order_total_1(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    for o in ix.orders.values():
        text = rng.choice([f"How much did I pay in total for order {o['id']}?",
                           f"What was the total of my order {o['id']}, in dollars?"])
        total = _money(o["total_cents"])
        yield ix.user_split(o["user_id"]), text, total, [call("get_order", order_id=o["id"]),
                                                         call("finish", answer=total)]


def product_price_1(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    for v in ix.variants.values():
        product = ix.products[v["product_id"]]
        text = rng.choice([f"How much does the {product['name']} ({ix.options(v['id'])}) cost?",
                           f"What's the price of the {product['name']} in {ix.options(v['id'])}?"])
        price = _money(v["price_cents"])
        split = "test" if v["id"] in ix.test_variants else "train"
        yield split, text, price, [call("find_products", query=product["name"]), call("finish", answer=price)]


# ---------------------------------------------------------------------------------------------- level 2
def cancel_order_2(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    for o in ix.orders.values():
        if o["status"] != "pending":
            continue
        reason = rng.choice(CANCEL_REASONS)
        text = f"Please cancel my order {o['id']}: {rng.choice(REASON_WORDS[reason])}."
        yield ix.user_split(o["user_id"]), text, None, [
            call("get_order", order_id=o["id"]), call("cancel_order", order_id=o["id"], reason=reason),
            call("finish", answer=f"Your order {o['id']} is cancelled and refunded.")]


def return_item_2(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    for o in ix.orders.values():
        if o["status"] != "delivered":
            continue
        item = rng.choice(ix.items[o["id"]])
        name = ix.product_of(item)["name"]
        text = rng.choice([f"I'd like to return the {name} from order {o['id']}.",
                           f"The {name} in my order {o['id']} isn't what I wanted. Can I return it?"])
        yield ix.user_split(o["user_id"]), text, None, [
            call("get_order", order_id=o["id"]), call("return_item", order_id=o["id"], item_id=item["id"]),
            call("finish", answer=f"The {name} is returned; you will be refunded.")]


def _swap(ix: _Index, rng: random.Random, status: str, tool: str, level: int) -> Iterator[Candidate]:
    """modify_item (pending) / exchange_item (delivered): change one item to another in-stock variant."""
    for o in ix.orders.values():
        if o["status"] != status:
            continue
        options = [i for i in ix.items[o["id"]] if ix.alternatives(i)]
        if not options:
            continue
        item = rng.choice(options)
        new = rng.choice(ix.alternatives(item))
        product = ix.product_of(item)
        want = ix.options(new["id"])
        swap = [call("get_product", product_id=product["id"]),
                call(tool, order_id=o["id"], item_id=item["id"], new_variant_id=new["id"]),
                call("finish", answer=f"Your {product['name']} is now the {want} one.")]
        if level == 2:
            if status == "pending":
                text = f"In my order {o['id']}, please change the {product['name']} to the {want} version."
            else:
                text = f"I received order {o['id']}. Can I exchange the {product['name']} for the {want} one?"
            yield ix.user_split(o["user_id"]), text, None, [call("get_order", order_id=o["id"]), *swap]
            continue
        if len(ix.orders_with(o["user_id"], product["id"], status)) != 1:
            continue  # "my pending order with the X" must name one order
        intro, find = _identify(ix, ix.users[o["user_id"]], rng)
        uid = o["user_id"]
        if status == "pending":
            text = f"{intro} In my pending order, please switch the {product['name']} to the {want} version."
        else:
            text = f"{intro} I'd like to exchange the {product['name']} I received for the {want} one."
        yield ix.user_split(uid), text, None, [find, call("list_orders", user_id=uid, status=status),
                                               call("get_order", order_id=o["id"]), *swap]


def modify_item_2(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    return _swap(ix, rng, "pending", "modify_order_item", 2)


def exchange_item_2(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    return _swap(ix, rng, "delivered", "exchange_item", 2)


# ---------------------------------------------------------------------------------------------- level 3
def _user_products(ix: _Index, status: str | None) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict, dict]]:
    """(user, order, item, product) where the product is in exactly one of the user's orders of ``status``."""
    for uid, orders in ix.orders_of.items():
        for o in orders:
            if status is not None and o["status"] != status:
                continue
            for item in ix.items[o["id"]]:
                product = ix.product_of(item)
                if len(ix.orders_with(uid, product["id"], status)) == 1:
                    yield ix.users[uid], o, item, product


def order_status_3(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    for user, o, _, product in _user_products(ix, None):
        intro, find = _identify(ix, user, rng)
        text = f"{intro} What's the status of my order with the {product['name']}?"
        yield ix.user_split(user["id"]), text, o["status"], [find, call("list_orders", user_id=user["id"]),
                                                             call("finish", answer=o["status"])]


def cancel_order_3(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    for user, o, _, product in _user_products(ix, "pending"):
        intro, find = _identify(ix, user, rng)
        reason = rng.choice(CANCEL_REASONS)
        text = (f"{intro} Please cancel my pending order that has the {product['name']} in it; "
                f"{rng.choice(REASON_WORDS[reason])}.")
        yield ix.user_split(user["id"]), text, None, [
            find, call("list_orders", user_id=user["id"], status="pending"),
            call("cancel_order", order_id=o["id"], reason=reason), call("finish", answer="Cancelled.")]


def return_item_3(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    for user, o, item, product in _user_products(ix, "delivered"):
        intro, find = _identify(ix, user, rng)
        text = f"{intro} I want to return the {product['name']} I received. How much will I get back?"
        refund = _money(item["price_cents"])
        yield ix.user_split(user["id"]), text, refund, [
            find, call("list_orders", user_id=user["id"], status="delivered"), call("get_order", order_id=o["id"]),
            call("return_item", order_id=o["id"], item_id=item["id"]), call("finish", answer=refund)]


def modify_item_3(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    return _swap(ix, rng, "pending", "modify_order_item", 3)


def exchange_item_3(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    return _swap(ix, rng, "delivered", "exchange_item", 3)


def multi_request_3(ix: _Index, rng: random.Random) -> Iterator[Candidate]:
    """Two or more writes: cancel every pending order of a customer, or cancel one order and return an item
    of another."""
    for uid, orders in ix.orders_of.items():
        user = ix.users[uid]
        pending = [o for o in orders if o["status"] == "pending"]
        delivered = [o for o in orders if o["status"] == "delivered"]
        if 2 <= len(pending) <= 4:
            intro, find = _identify(ix, user, rng)
            reason = rng.choice(CANCEL_REASONS)
            text = f"{intro} Please cancel all my pending orders; {rng.choice(REASON_WORDS_PLURAL[reason])}."
            cancels = [call("cancel_order", order_id=o["id"], reason=reason)
                       for o in sorted(pending, key=lambda o: o["id"])]
            yield ix.user_split(uid), text, None, [find, call("list_orders", user_id=uid, status="pending"),
                                                   *cancels, call("finish", answer="All cancelled.")]
        if pending and delivered:
            a, b = rng.choice(pending), rng.choice(delivered)
            item = rng.choice(ix.items[b["id"]])
            name = ix.product_of(item)["name"]
            reason = rng.choice(CANCEL_REASONS)
            text = (f"Two things, please: cancel my order {a['id']} ({rng.choice(REASON_WORDS[reason])}), and "
                    f"I want to return the {name} from order {b['id']}.")
            yield ix.user_split(uid), text, None, [
                call("get_order", order_id=a["id"]), call("cancel_order", order_id=a["id"], reason=reason),
                call("get_order", order_id=b["id"]), call("return_item", order_id=b["id"], item_id=item["id"]),
                call("finish", answer="Done: cancelled and returned.")]


GENERATORS: dict[tuple[int, str], Callable[[_Index, random.Random], Iterator[Candidate]]] = {
    (1, "order_status"): order_status_1, (1, "order_total"): order_total_1, (1, "product_price"): product_price_1,
    (2, "cancel_order"): cancel_order_2, (2, "return_item"): return_item_2, (2, "modify_item"): modify_item_2,
    (2, "exchange_item"): exchange_item_2,
    (3, "order_status"): order_status_3, (3, "cancel_order"): cancel_order_3, (3, "return_item"): return_item_3,
    (3, "modify_item"): modify_item_3, (3, "exchange_item"): exchange_item_3,
    (3, "multi_request"): multi_request_3,
}


# ---------------------------------------------------------------------------------------------- goals
class Replayer(ShopTools):
    """Runs a list of calls on a fresh copy of the database and reports the rows they changed."""

    toolset = ToolSet.from_class(ShopTools)

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.conn = sqlite3.connect(":memory:")

    def replay(self, solution: list[dict[str, Any]]) -> dict[str, Any]:
        """``changes`` after the calls (``finish`` is skipped); raises ValueError if any call fails."""
        self.conn.deserialize(database_image(self.seed))
        for c in solution:
            if c["name"] == "finish":
                continue
            outcome = self.toolset.run(format_tool_call(c["name"], c["arguments"]), owner=self)
            if outcome.error:
                raise ValueError(f"reference call {c} failed: {outcome.observation}")
        return changes(self.conn, self.seed)


def _distinct(candidates: Iterator[Candidate]) -> list[Candidate]:
    """The candidates in order, without repeated request texts (one task per request)."""
    seen: set[str] = set()
    out = []
    for c in candidates:
        if c[1] not in seen:
            seen.add(c[1])
            out.append(c)
    return out


@lru_cache(maxsize=4)
def generate_tasks(seed: int = 0) -> tuple[Task, ...]:
    """All shop tasks for database ``seed``: the quotas of :data:`QUOTAS`, deterministic."""
    ix = _Index(dataset(seed), seed)
    replayer = Replayer(seed)
    tasks: list[Task] = []
    for (level, intent), generator in GENERATORS.items():
        rng = random.Random(f"shop-tasks-{seed}-{level}-{intent}")
        candidates = list(generator(ix, rng))
        rng.shuffle(candidates)
        for split, quota in zip(("train", "test"), QUOTAS[(level, intent)]):
            chosen = _distinct(c for c in candidates if c[0] == split)[:quota]
            if len(chosen) < quota:
                raise RuntimeError(f"shop seed {seed}: only {len(chosen)} {split} tasks for {intent} level {level}")
            for k, (_, text, answer, solution) in enumerate(chosen):
                goal = {"answer": answer, "changes": replayer.replay(solution)}
                tasks.append(Task(f"shop-{split}-{level}-{intent}-{k:03d}", split=split, level=level,
                                  intent=intent, instruction=text, goal=goal, solution=solution))
    replayer.conn.close()
    return tuple(tasks)


def counts(tasks: list[Task] | tuple[Task, ...]) -> Counter:
    """(split, level, intent) -> number of tasks: the table in the docs."""
    return Counter((t.split, t.level, t.intent) for t in tasks)
