"""The shop's tools: typed methods over a SQLite connection, with the store's rules enforced.

Every query is parameterised (``?`` placeholders; the only names put into SQL text are fixed table and column
names from this module), so an argument such as ``x' OR '1'='1`` is just a string that matches nothing.
A call that breaks a store rule (an unknown id, cancelling a delivered order, a variant of another product, an
item out of stock) raises :class:`ToolError`: the agent sees the reason and the database is left unchanged.
Writes run in one transaction each and are rolled back if anything fails half-way.

The rules (tau-bench's retail policy, simplified): only *pending* orders can be cancelled or have an item
changed to another variant of the same product; only *delivered* orders can have items returned or exchanged;
*processed* orders can no longer be changed; money moves to or from the order's own payment method.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from typing import Any, Iterator, Literal

from selfevolve.envs.tools.calls import ToolError, tool

Status = Literal["pending", "processed", "delivered", "cancelled"]
Reason = Literal["no longer needed", "ordered by mistake"]


def money(cents: int) -> float:
    """Cents as dollars for the agent (2 decimals)."""
    return round(cents / 100, 2)


class ShopTools:
    """The shop's tools as ``@tool`` methods; a subclass provides ``self.conn`` (an open connection)."""

    conn: sqlite3.Connection

    # ------------------------------------------------------------------ helpers (not tools)
    def _rows(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        # always fetchall: a statement left open when an episode deserialises a new database crashes sqlite
        cur = self.conn.execute(sql, params)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def _row(self, sql: str, params: tuple = ()) -> dict[str, Any] | None:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        try:
            yield
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    def _by_id(self, table: str, label: str, row_id: str) -> dict[str, Any]:
        """The row of ``table`` (one of our own table names, never user text) with this id, or a ToolError."""
        row = self._row(f"SELECT * FROM {table} WHERE id = ?", (row_id,))
        if row is None:
            raise ToolError(f"no {label} with id {row_id!r}")
        return row

    def _user(self, user_id: str) -> dict[str, Any]:
        return self._by_id("users", "user", user_id)

    def _order(self, order_id: str) -> dict[str, Any]:
        return self._by_id("orders", "order", order_id)

    def _item(self, order: dict[str, Any], item_id: str) -> dict[str, Any]:
        item = self._row("SELECT * FROM order_items WHERE id = ? AND order_id = ?", (item_id, order["id"]))
        if item is None:
            raise ToolError(f"order {order['id']} has no item {item_id!r}")
        if item["status"] != "ordered":
            raise ToolError(f"item {item_id} was already {item['status']}")
        return item

    def _variant(self, variant_id: str) -> dict[str, Any]:
        return self._by_id("variants", "variant", variant_id)

    def _require(self, order: dict[str, Any], status: str, action: str) -> None:
        if order["status"] != status:
            raise ToolError(f"order {order['id']} is {order['status']}: only {status} orders can {action}")

    def _replacement(self, item: dict[str, Any], new_variant_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(old variant, new variant) for swapping an item: same product, a different variant, in stock."""
        old, new = self._variant(item["variant_id"]), self._variant(new_variant_id)
        if new["product_id"] != old["product_id"]:
            raise ToolError(f"variant {new_variant_id} is a different product; only variants of "
                            f"{old['product_id']} can replace item {item['id']}")
        if new["id"] == old["id"]:
            raise ToolError(f"item {item['id']} already is variant {new_variant_id}")
        if new["stock"] < 1:
            raise ToolError(f"variant {new_variant_id} is out of stock")
        return old, new

    def _adjust(self, order: dict[str, Any], item_id: str, kind: str, amount_cents: int) -> None:
        """Record money moved for an item (positive: charged, negative: refunded), one row per item and kind."""
        if amount_cents:
            self.conn.execute(
                "INSERT INTO payments (id, order_id, payment_method_id, kind, amount_cents) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET amount_cents = amount_cents + excluded.amount_cents",
                (f"{item_id}-{kind}", order["id"], order["payment_method_id"], kind, amount_cents))

    def _product(self, product_id: str) -> dict[str, Any]:
        product = self._row("SELECT * FROM products WHERE id = ?", (product_id,))
        if product is None:
            raise ToolError(f"no product with id {product_id!r}")
        variants = self._rows("SELECT * FROM variants WHERE product_id = ? ORDER BY id", (product_id,))
        return {"product_id": product["id"], "name": product["name"], "category": product["category"],
                "variants": [{"variant_id": v["id"], "options": json.loads(v["options"]),
                              "price": money(v["price_cents"]), "stock": v["stock"]} for v in variants]}

    # ------------------------------------------------------------------ look-ups
    @tool
    def find_user_by_email(self, email: str) -> dict[str, str]:
        """Find a customer's user id from the email address on their account.

        Args:
            email: the customer's email address (case does not matter).
        """
        user = self._row("SELECT id FROM users WHERE email = ?", (email.strip(),))
        if user is None:
            raise ToolError(f"no user with email {email!r}")
        return {"user_id": user["id"]}

    @tool
    def find_user_by_name_zip(self, first_name: str, last_name: str, zip: str) -> dict[str, str]:
        """Find a customer's user id from their first name, last name and zip code.

        Args:
            first_name: the customer's first name.
            last_name: the customer's last name.
            zip: the zip code of the customer's address, e.g. "02108".
        """
        user = self._row(
            "SELECT id FROM users WHERE first_name = ? COLLATE NOCASE AND last_name = ? COLLATE NOCASE AND zip = ?",
            (first_name.strip(), last_name.strip(), zip.strip()))
        if user is None:
            raise ToolError(f"no user named {first_name} {last_name} with zip {zip!r}")
        return {"user_id": user["id"]}

    @tool
    def get_user(self, user_id: str) -> dict[str, Any]:
        """Get a customer's details: name, email, address, payment methods and order ids.

        Args:
            user_id: the user id, e.g. "U042".
        """
        user = self._user(user_id)
        methods = self._rows("SELECT id, kind, description FROM payment_methods WHERE user_id = ? ORDER BY id",
                             (user_id,))
        orders = [r["id"] for r in self._rows("SELECT id FROM orders WHERE user_id = ? ORDER BY created, id",
                                              (user_id,))]
        return {"user_id": user["id"], "name": f"{user['first_name']} {user['last_name']}",
                "email": user["email"], "zip": user["zip"], "city": user["city"],
                "payment_methods": methods, "orders": orders}

    @tool
    def list_orders(self, user_id: str, status: Status | None = None) -> list[dict[str, Any]]:
        """List a customer's orders (oldest first) with their status, date, total and product names.

        Args:
            user_id: the user id, e.g. "U042".
            status: only orders with this status (leave out for all orders).
        """
        self._user(user_id)
        sql, params = "SELECT * FROM orders WHERE user_id = ?", (user_id,)
        if status is not None:
            sql, params = sql + " AND status = ?", (user_id, status)
        out = []
        for order in self._rows(sql + " ORDER BY created, id", params):
            names = self._rows(
                "SELECT p.name FROM order_items i JOIN variants v ON v.id = i.variant_id "
                "JOIN products p ON p.id = v.product_id WHERE i.order_id = ? ORDER BY i.id", (order["id"],))
            out.append({"order_id": order["id"], "status": order["status"], "created": order["created"],
                        "total": money(order["total_cents"]), "products": [n["name"] for n in names]})
        return out

    @tool
    def get_order(self, order_id: str) -> dict[str, Any]:
        """Get an order: its status, items (with item ids, variants and prices), total and payments.

        Args:
            order_id: the order id, e.g. "W1234".
        """
        order = self._order(order_id)
        items = self._rows(
            "SELECT i.id, i.variant_id, i.price_cents, i.status, i.new_variant_id, v.options, p.id AS product_id, "
            "p.name FROM order_items i JOIN variants v ON v.id = i.variant_id JOIN products p ON p.id = v.product_id "
            "WHERE i.order_id = ? ORDER BY i.id", (order_id,))
        payments = self._rows("SELECT kind, amount_cents FROM payments WHERE order_id = ? ORDER BY id", (order_id,))
        out_items = []
        for i in items:
            entry = {"item_id": i["id"], "product_id": i["product_id"], "product": i["name"],
                     "variant_id": i["variant_id"], "options": json.loads(i["options"]),
                     "price": money(i["price_cents"]), "status": i["status"]}
            if i["new_variant_id"]:
                entry["exchanged_for"] = i["new_variant_id"]
            out_items.append(entry)
        return {"order_id": order["id"], "user_id": order["user_id"], "status": order["status"],
                "created": order["created"], "total": money(order["total_cents"]),
                "payment_method_id": order["payment_method_id"], "items": out_items,
                "payments": [{"kind": p["kind"], "amount": money(p["amount_cents"])} for p in payments]}

    @tool
    def find_products(self, query: str) -> list[dict[str, Any]]:
        """Search products by name or category; each match comes with its variants (id, options, price, stock).

        Args:
            query: words of the product name or its category, e.g. "backpack" or "kitchen".
        """
        text = query.strip()
        if not text:
            raise ToolError("give part of a product name or a category")
        if "\x00" in text:  # SQLite ends a LIKE pattern at NUL: 'x\x00' would match the whole catalogue
            raise ToolError("a product name or category never holds a NUL character")
        pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        found = self._rows("SELECT id FROM products WHERE name LIKE ? ESCAPE '\\' OR category LIKE ? ESCAPE '\\' "
                           "ORDER BY id", (pattern, pattern))
        if not found:
            raise ToolError(f"no product matches {query!r}")
        return [self._product(r["id"]) for r in found]

    @tool
    def get_product(self, product_id: str) -> dict[str, Any]:
        """Get a product and all its variants (id, options, price, stock).

        Args:
            product_id: the product id, e.g. "P03".
        """
        return self._product(product_id)

    # ------------------------------------------------------------------ writes
    @tool(writes=True)
    def cancel_order(self, order_id: str, reason: Reason) -> dict[str, Any]:
        """Cancel a pending order: its items go back to stock and the total is refunded to its payment method.

        Args:
            order_id: the order id, e.g. "W1234".
            reason: why the customer cancels.
        """
        order = self._order(order_id)
        self._require(order, "pending", "be cancelled")
        with self._write():
            self.conn.execute("UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE id = ?",
                              (reason, order_id))
            self.conn.execute("UPDATE variants SET stock = stock + 1 WHERE id IN "
                              "(SELECT variant_id FROM order_items WHERE order_id = ?)", (order_id,))
            self.conn.execute(
                "INSERT INTO payments (id, order_id, payment_method_id, kind, amount_cents) VALUES (?, ?, ?, ?, ?)",
                (f"{order_id}-cancel", order_id, order["payment_method_id"], "refund", -order["total_cents"]))
        return {"order_id": order_id, "status": "cancelled", "refund": money(order["total_cents"])}

    @tool(writes=True)
    def modify_order_item(self, order_id: str, item_id: str, new_variant_id: str) -> dict[str, Any]:
        """Change an item of a pending order to another variant of the same product (e.g. another size); the
        price difference is charged or refunded.

        Args:
            order_id: the order id, e.g. "W1234".
            item_id: the item to change, e.g. "W1234-2" (see get_order).
            new_variant_id: the variant it becomes, e.g. "P03-4" (see get_product).
        """
        order = self._order(order_id)
        self._require(order, "pending", "be modified")
        item = self._item(order, item_id)
        old, new = self._replacement(item, new_variant_id)
        difference = new["price_cents"] - item["price_cents"]
        with self._write():
            self.conn.execute("UPDATE order_items SET variant_id = ?, price_cents = ? WHERE id = ?",
                              (new["id"], new["price_cents"], item_id))
            self.conn.execute("UPDATE variants SET stock = stock + 1 WHERE id = ?", (old["id"],))
            self.conn.execute("UPDATE variants SET stock = stock - 1 WHERE id = ?", (new["id"],))
            self.conn.execute("UPDATE orders SET total_cents = total_cents + ? WHERE id = ?", (difference, order_id))
            self._adjust(order, item_id, "modify", difference)
        return {"order_id": order_id, "item_id": item_id, "variant_id": new["id"], "price": money(new["price_cents"]),
                "price_difference": money(difference)}

    @tool(writes=True)
    def return_item(self, order_id: str, item_id: str) -> dict[str, Any]:
        """Return an item of a delivered order; its price is refunded to the order's payment method.

        Args:
            order_id: the order id, e.g. "W1234".
            item_id: the item to return, e.g. "W1234-2" (see get_order).
        """
        order = self._order(order_id)
        self._require(order, "delivered", "have items returned")
        item = self._item(order, item_id)
        with self._write():
            self.conn.execute("UPDATE order_items SET status = 'returned' WHERE id = ?", (item_id,))
            self.conn.execute("UPDATE variants SET stock = stock + 1 WHERE id = ?", (item["variant_id"],))
            self._adjust(order, item_id, "return", -item["price_cents"])
        return {"order_id": order_id, "item_id": item_id, "status": "returned", "refund": money(item["price_cents"])}

    @tool(writes=True)
    def exchange_item(self, order_id: str, item_id: str, new_variant_id: str) -> dict[str, Any]:
        """Exchange an item of a delivered order for another variant of the same product; the price difference
        is charged or refunded.

        Args:
            order_id: the order id, e.g. "W1234".
            item_id: the item to exchange, e.g. "W1234-2" (see get_order).
            new_variant_id: the variant the customer gets instead, e.g. "P03-4" (see get_product).
        """
        order = self._order(order_id)
        self._require(order, "delivered", "have items exchanged")
        item = self._item(order, item_id)
        old, new = self._replacement(item, new_variant_id)
        difference = new["price_cents"] - item["price_cents"]
        with self._write():
            self.conn.execute("UPDATE order_items SET status = 'exchanged', new_variant_id = ? WHERE id = ?",
                              (new["id"], item_id))
            self.conn.execute("UPDATE variants SET stock = stock + 1 WHERE id = ?", (old["id"],))
            self.conn.execute("UPDATE variants SET stock = stock - 1 WHERE id = ?", (new["id"],))
            self._adjust(order, item_id, "exchange", difference)
        return {"order_id": order_id, "item_id": item_id, "status": "exchanged", "new_variant_id": new["id"],
                "price_difference": money(difference)}
