"""The shop world: a tau-bench-like customer-service desk over a real SQLite database.

The agent reads a customer's request, looks users, orders and products up with tools, changes orders when the
request and the store's rules allow it (cancel, change an item's variant, return, exchange) and ends with
``finish(answer)``. The world decides success itself: the final database must differ from the start by exactly
the rows the task's goal lists, and a question's answer must match (see :mod:`selfevolve.envs.tools.shop_tasks`).

Isolation: the seeded database is built once per process as a serialised image; every episode deserialises
its own copy into the env's private in-memory connection, so writes never reach another episode or another
env. Snapshots are the serialised database plus the episode's plain fields, so restore is exact.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from selfevolve.envs.profile import Entity, EnvProfile
from selfevolve.envs.task_files import load_tasks
from selfevolve.envs.tools.base import ToolWorld, answers_match, check_seed_option, operations, tool_prompt
from selfevolve.envs.tools.calls import ToolSet, format_tool_call
from selfevolve.envs.tools.shop_data import TABLES, changes, columns, database_image
from selfevolve.envs.tools.shop_tasks import QUOTAS, generate_tasks, held_out_marks, held_out_users
from selfevolve.envs.tools.shop_tools import ShopTools
from selfevolve.types import Task

RULES = (
    "Only pending orders can be cancelled, or have an item changed to another variant of the same product.",
    "Only delivered orders can have items returned or exchanged for another variant of the same product.",
    "Processed orders can no longer be changed.",
    "An item can be changed only to a variant that is in stock.",
    "Refunds and extra charges go to the order's own payment method.",
)

def _instructions(toolset: ToolSet, listing: bool = True) -> str:
    rules = "\n".join(f"- {r}" for r in RULES)
    intro = (
        "You are a customer-service agent of an online shop. Solve the customer's request with the tools below.\n"
        f"Store rules:\n{rules}\n"
        "Amounts are in dollars. Look things up before you change them. When you are done, call finish: with "
        "just the requested value if the customer asked a question (e.g. \"delivered\" or \"42.5\"), otherwise "
        "a short confirmation."
    )
    return tool_prompt(intro, toolset, format_tool_call("get_order", {"order_id": "W1234"}), listing)


class ShopEnv(ShopTools, ToolWorld):
    """Customer service on a SQLite shop database (users, products with variants, orders, payments).

    Options:
        split: "train", "test", "synth" (tasks written by self-questioning, from ``tasks_file``), "all", or several joined by "+" (e.g. "train+synth"): which tasks ``reset(seed)`` draws from (test customers are held out).
        level: None for every level, or 1 (one look-up and an answer), 2 (look-ups and one write), 3 (finding
            the customer first, several look-ups and writes).
        max_turns: the turn limit; the episode ends unsolved when it is reached.
        invalid_penalty: reward subtracted for a reply that is not a well-formed call of a known tool.
        tool_error_penalty: reward subtracted when a tool refuses a call (unknown id, a rule broken); 0 by
            default — the refusal message is feedback enough.
        db_seed: the database (and task) seed; 0 is the shipped world.
        tasks_file: a JSONL file of extra tasks (:meth:`Task.to_dict` per line) added to the generated ones.

    Observation: the customer's request first, then each tool's result as JSON (errors as ``Error: ...``).
    Reward: 1.0 when ``finish`` ends a solved task, ``-invalid_penalty`` for an invalid reply, 0 otherwise.
    """

    name = "shop"
    levels = (1, 2, 3)

    def __init__(self, split: str = "train", level: int | None = None, max_turns: int = 10,
                 invalid_penalty: float = 0.1, tool_error_penalty: float = 0.0, db_seed: int = 0,
                 tasks_file: str = ""):
        check_seed_option("shop", "db_seed", db_seed)
        self.db_seed, self.tasks_file = db_seed, str(tasks_file or "")
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.conn.deserialize(database_image(db_seed))
        super().__init__(split, level, max_turns, invalid_penalty, tool_error_penalty)

    # ------------------------------------------------------------------ the world's parts
    def all_tasks(self) -> list[Task]:
        tasks = list(generate_tasks(self.db_seed))
        return tasks + (load_tasks(self.tasks_file) if self.tasks_file else [])

    def begin(self, task: Task) -> None:
        self.conn.deserialize(database_image(self.db_seed))  # a fresh private copy: nothing leaks in

    def goal_reached(self, answer: str) -> bool:
        goal = self.task.goal
        return answers_match(answer, goal.get("answer")) and self.changes() == goal.get("changes", {})

    def derived_goal(self, answer: Any) -> dict[str, Any]:
        return {"answer": answer, "changes": self.changes()}

    def held_out_marks(self) -> set[str]:
        return set(held_out_marks(self.db_seed))

    def exploration_anchor(self, seed: int) -> str:
        """One training customer per sandbox seed (name and email): every shop operation but find_products needs
        an id or email, which an explorer cannot list."""
        marks = self.held_out_marks()  # a training customer may share a test customer's name: left out too
        users = self.conn.execute("SELECT id, first_name, last_name, email FROM users ORDER BY id").fetchall()
        users = [u for u in users if not {u[0], f"{u[1]} {u[2]}", u[3]} & marks]
        _, first, last, email = users[seed % len(users)]
        return f"One customer of this shop, to start from: {first} {last}, email {email}."

    def changes(self) -> dict[str, Any]:
        """The rows this episode has inserted, updated or deleted so far (see ``shop_data.changes``)."""
        return changes(self.conn, self.db_seed)

    def world_snapshot(self) -> bytes:
        return self.conn.serialize()

    def world_restore(self, snap: bytes) -> None:
        self.conn.deserialize(snap)

    # ------------------------------------------------------------------ copying and pickling
    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k != "conn"}
        state["_database"] = self.conn.serialize()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        image = state.pop("_database")
        self.__dict__.update(state)
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.conn.deserialize(image)

    def close(self) -> None:
        self.conn.close()


ShopEnv.instructions = _instructions(ShopEnv.toolset)
ShopEnv.tool_instructions = _instructions(ShopEnv.toolset, listing=False)


def _examples() -> list[tuple[str, str]]:
    """A two-turn episode on a processed order of a training customer that no task asks about (look the order
    up, then answer)."""
    asked = {c["arguments"].get("order_id") for t in generate_tasks(0) for c in t.solution}
    held_out = held_out_users(0)
    env = ShopEnv()
    # fetchall: a statement left open on the connection when the next episode deserialises its database
    # would crash the interpreter (sqlite frees the pages under it)
    processed = env.conn.execute("SELECT id, user_id FROM orders WHERE status = 'processed' ORDER BY id").fetchall()
    order = next(oid for oid, uid in processed if oid not in asked and uid not in held_out)
    question = f"Hi! What is the status of my order {order}?"
    turns = env.demonstrate(Task("shop-example", split="train", level=1, intent="order_status",
                                 instruction=question, goal={"answer": "processed", "changes": {}},
                                 solution=[{"name": "get_order", "arguments": {"order_id": order}},
                                           {"name": "finish", "arguments": {"answer": "processed"}}]))
    env.close()
    return turns


ShopEnv.examples = _examples()

SHOP_PROFILE = EnvProfile(
    name="shop",
    background=(
        "An online shop's customer-service desk. Customers (users) have payment methods and place orders; an "
        "order holds items, each a variant (colour, size, ...) of a product, and moves from pending to processed "
        "to delivered, or is cancelled. Customers write in to ask about orders and products or to cancel, change, "
        "return or exchange items; the agent identifies them by email or by name and zip code, looks the records "
        "up and changes them within the store rules. Money is in dollars."
    ),
    entities=(
        Entity("user", "a customer account", tuple(columns("users"))),
        Entity("payment_method", "a card, PayPal account or gift card of a user", tuple(columns("payment_methods"))),
        Entity("product", "a product of the catalogue", tuple(columns("products"))),
        Entity("variant", "one buyable version of a product (options such as colour and size, price, stock)",
               tuple(columns("variants"))),
        Entity("order", "a user's order; status pending, processed, delivered or cancelled", tuple(columns("orders"))),
        Entity("order_item", "one variant in an order; status ordered, returned or exchanged",
               tuple(columns("order_items"))),
        Entity("payment", "money moved for an order: the purchase, refunds and price differences",
               tuple(columns("payments"))),
    ),
    operations=operations(ShopEnv.toolset),
    rules=RULES,
    intents=tuple(dict.fromkeys(intent for _, intent in QUOTAS)),
    extra={"tables": list(TABLES), "levels": {"1": "one look-up and an answer", "2": "look-ups and one write",
                                              "3": "identify the customer, several look-ups and writes"}},
)
ShopEnv.intents = SHOP_PROFILE.intents  # the declared intent set (SEER's intent classifier chooses among them)
ShopEnv.profile = SHOP_PROFILE  # what self-questioning explores from (selfevolve/questioning/)
