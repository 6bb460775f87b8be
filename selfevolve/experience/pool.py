"""The experience pool: one SQLite file in the run folder (``experience.sqlite``) holding what the agent has
learnt from — successful trajectories (SEER recalls them) and distilled insights (self-navigating shows them).

A row records its text, the embedding of that text, the embedding of its *key* (a trajectory's request, an
insight's ``when_to_use``), intent, tool sequence, few-shot turns, score and success, origin (``seed``,
``rollout``, ``extracted``, ``eval``) and the training step that added it. The embedding model's name and
dimension are stored in the file; opening a pool with another model re-embeds its rows from their texts.

The pool is part of the run's state: a checkpoint of step N keeps exactly the rows with ``step <= N``, so
resume calls :meth:`ExperiencePool.truncate` to drop whatever a crashed step added after it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from selfevolve.errors import SelfEvolveError
from selfevolve.untrusted import loads_json

FILE = "experience.sqlite"
KINDS = ("trajectory", "insight")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,              -- 'trajectory' | 'insight'
    text TEXT NOT NULL,              -- trajectory: request, actions and results; insight: its content
    key_text TEXT NOT NULL,          -- trajectory: the request (query); insight: when_to_use
    embedding BLOB NOT NULL,         -- float32 embedding of text (E_tau)
    key_embedding BLOB NOT NULL,     -- float32 embedding of key_text (E_q)
    intent TEXT,
    tools TEXT NOT NULL DEFAULT '[]',  -- JSON list of tool names in call order (U_tau)
    turns TEXT NOT NULL DEFAULT '[]',  -- JSON [[observation, action], ...]: the few-shot episode
    score REAL NOT NULL DEFAULT 0,
    success INTEGER NOT NULL DEFAULT 0,
    origin TEXT NOT NULL,            -- 'seed' | 'rollout' | 'extracted' | 'eval' | 'imported'
    step INTEGER NOT NULL,           -- the training step that added it (0: before training)
    task_id TEXT NOT NULL DEFAULT '',
    env TEXT NOT NULL DEFAULT '',
    info TEXT NOT NULL DEFAULT '{}'  -- JSON: anything else (e.g. the group an insight came from)
);
CREATE INDEX IF NOT EXISTS items_kind ON items(kind);
"""


@dataclass
class NewItem:
    """What :meth:`ExperiencePool.add` stores (the pool embeds ``text`` and ``key_text``)."""

    kind: str
    text: str
    key_text: str
    intent: str | None = None
    tools: list[str] = field(default_factory=list)
    turns: list[tuple[str, str]] = field(default_factory=list)
    score: float = 0.0
    success: bool = False
    task_id: str = ""
    env: str = ""
    info: dict = field(default_factory=dict)


@dataclass
class Item(NewItem):
    """One pool row, as plain values (embeddings are in :meth:`ExperiencePool.matrix`)."""

    id: int = 0
    origin: str = "rollout"
    step: int = 0


class ExperiencePool:
    """Rows in SQLite, embeddings cached in memory per kind. ``path=":memory:"`` makes a scratch pool."""

    def __init__(self, path: str | Path, embedder):
        self.path = str(path)
        self.embedder = embedder
        try:
            self.conn = _connect(self.path)
            self.conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise SelfEvolveError(f"{self.path}: not an experience pool ({e})") from None
        self._cache: dict[str, tuple[list[Item], np.ndarray, np.ndarray]] = {}
        self._check_embedder()

    # ---- the embedding model ----------------------------------------------------------------------------
    def _meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta").fetchall())

    def _check_embedder(self) -> None:
        meta = self._meta()
        name, dim = self.embedder.name, None
        if meta and (meta.get("embedder") != name) and self.count():
            # another model wrote these vectors: re-embed every row from its texts (they are all kept)
            dim = self._reembed()
        if not meta or meta.get("embedder") != name:
            dim = dim or self.embedder.dim
            with self.conn:
                self.conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                      [("embedder", name), ("dim", str(dim)), ("format", "1")])

    def _reembed(self) -> int:
        rows = self.conn.execute("SELECT id, text, key_text FROM items ORDER BY id").fetchall()
        texts = self.embedder.encode([r[1] for r in rows])
        keys = self.embedder.encode([r[2] for r in rows])
        with self.conn:
            self.conn.executemany("UPDATE items SET embedding = ?, key_embedding = ? WHERE id = ?",
                                  [(t.tobytes(), k.tobytes(), r[0]) for r, t, k in zip(rows, texts, keys)])
        self._cache.clear()
        return int(texts.shape[1]) if len(rows) else self.embedder.dim

    @property
    def dim(self) -> int:
        return _int_or(self._meta().get("dim"), self.embedder.dim)

    # ---- writing ----------------------------------------------------------------------------------------
    def add(self, items: list[NewItem], step: int, origin: str) -> list[int]:
        """Embed and store ``items`` (one embedding call for all); returns their ids."""
        if not items:
            return []
        for it in items:
            if it.kind not in KINDS:
                raise ValueError(f"pool item kind must be one of {KINDS}, got {it.kind!r}")
        vecs = self.embedder.encode([it.text for it in items] + [it.key_text for it in items])
        n = len(items)
        ids = []
        now = time.time()
        with self.conn:
            for it, v, kv in zip(items, vecs[:n], vecs[n:]):
                cur = self.conn.execute(
                    "INSERT INTO items (kind, text, key_text, embedding, key_embedding, intent, tools, turns, score,"
                    " success, origin, step, task_id, env, info) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (it.kind, it.text, it.key_text, v.tobytes(), kv.tobytes(), it.intent, json.dumps(it.tools),
                     json.dumps([list(t) for t in it.turns]), float(it.score), int(bool(it.success)), origin,
                     int(step), it.task_id, it.env, json.dumps({**it.info, "added": now})))
                ids.append(int(cur.lastrowid))
        self._cache.clear()
        return ids

    def truncate(self, step: int) -> int:
        """Drop the rows added after training step ``step`` (resume); returns how many."""
        with self.conn:
            n = self.conn.execute("DELETE FROM items WHERE step > ?", (int(step),)).rowcount
        self._cache.clear()
        return n

    def import_from(self, other: str | Path, step: int = 0) -> int:
        """Copy every row of another pool (a run folder or its ``experience.sqlite``), re-embedded with this
        pool's model when the other used another one; they count as added at ``step``. Returns how many."""
        path = Path(other)
        if path.is_dir():
            path = path / FILE
        if not path.is_file():
            raise SelfEvolveError(f"experience.pool={str(other)!r}: no experience pool there (expected a run "
                                  f"folder holding {FILE} or the file itself)")
        conn = None
        try:
            conn = _connect(path, readonly=True)
            cols = "kind, text, key_text, embedding, key_embedding, intent, tools, turns, score, success, origin, " \
                   "task_id, env, info, id"
            rows = conn.execute(f"SELECT {cols} FROM items ORDER BY id").fetchall()
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as e:
            raise SelfEvolveError(f"experience.pool={str(other)!r}: not an experience pool ({e})") from None
        finally:
            if conn is not None:
                conn.close()
        same = meta.get("embedder") == self.embedder.name
        dim = _int_or(meta.get("dim"), self.embedder.dim) if same else None
        for r in rows:  # the other pool is untrusted input: every row is checked before it is copied
            _check_row(path, r[14], kind=r[0], text=r[1], key_text=r[2], embedding=r[3], key_embedding=r[4],
                       intent=r[5], tools=r[6], turns=r[7], score=r[8], success=r[9], origin=r[10], task_id=r[11],
                       env=r[12], info=r[13], dim=dim)
        rows = [r[:14] for r in rows]
        if rows and not same:
            vecs = self.embedder.encode([r[1] for r in rows] + [r[2] for r in rows])
            rows = [(*r[:3], v.tobytes(), kv.tobytes(), *r[5:]) for r, v, kv in zip(rows, vecs[:len(rows)],
                                                                                     vecs[len(rows):])]
        with self.conn:
            self.conn.executemany(
                "INSERT INTO items (kind, text, key_text, embedding, key_embedding, intent, tools, turns, score, "
                "success, origin, task_id, env, info, step) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [(*r, int(step)) for r in rows])
        self._cache.clear()
        return len(rows)

    def scratch_copy(self) -> "ExperiencePool":
        """An in-memory copy (evaluation's test-time accumulation writes there, never to the run's pool)."""
        other = ExperiencePool.__new__(ExperiencePool)
        other.path, other.embedder, other._cache = ":memory:", self.embedder, {}
        other.conn = sqlite3.connect(":memory:")
        self.conn.backup(other.conn)
        return other

    def to_bytes(self) -> bytes:
        """The whole pool as bytes (SQLite's own image of it): what the Ray workers recall from."""
        return self.conn.serialize()

    @classmethod
    def from_bytes(cls, data: bytes, embedder) -> "ExperiencePool":
        """An in-memory pool from :meth:`to_bytes` (written by this run's driver, so trusted)."""
        other = cls.__new__(cls)
        other.path, other.embedder, other._cache = ":memory:", embedder, {}
        other.conn = sqlite3.connect(":memory:")
        other.conn.deserialize(data)
        return other

    def close(self) -> None:
        self.conn.close()

    # ---- reading ----------------------------------------------------------------------------------------
    def count(self, kind: str | None = None) -> int:
        if kind is None:
            return int(self.conn.execute("SELECT COUNT(*) FROM items").fetchone()[0])
        return int(self.conn.execute("SELECT COUNT(*) FROM items WHERE kind = ?", (kind,)).fetchone()[0])

    def _load(self, kind: str) -> tuple[list[Item], np.ndarray, np.ndarray]:
        if kind not in self._cache:
            rows = self.conn.execute(
                "SELECT id, kind, text, key_text, intent, tools, turns, score, success, origin, step, task_id, env, "
                "info, embedding, key_embedding FROM items WHERE kind = ? ORDER BY id", (kind,)).fetchall()
            dim = self.dim
            items = [_check_row(self.path, r[0], kind=r[1], text=r[2], key_text=r[3], intent=r[4], tools=r[5],
                                turns=r[6], score=r[7], success=r[8], origin=r[9], step=r[10], task_id=r[11],
                                env=r[12], info=r[13], embedding=r[14], key_embedding=r[15], dim=dim)
                     for r in rows]
            emb = np.stack([np.frombuffer(r[14], dtype=np.float32) for r in rows]) if rows else \
                np.zeros((0, dim), np.float32)
            key = np.stack([np.frombuffer(r[15], dtype=np.float32) for r in rows]) if rows else \
                np.zeros((0, dim), np.float32)
            self._cache[kind] = (items, emb, key)
        return self._cache[kind]

    def items(self, kind: str = "trajectory") -> list[Item]:
        return self._load(kind)[0]

    def matrix(self, kind: str = "trajectory", key: bool = False) -> np.ndarray:
        """The embeddings of ``kind``'s rows, in :meth:`items` order: of their text, or of their key."""
        return self._load(kind)[2 if key else 1]

    def has_text(self, kind: str, text: str) -> bool:
        return self.conn.execute("SELECT 1 FROM items WHERE kind = ? AND text = ? LIMIT 1",
                                 (kind, text)).fetchone() is not None


# ---- untrusted pools ------------------------------------------------------------------------------------------
# A pool may come from someone else's run folder (resume, eval, experience.pool=PATH). SQLite reads such a file
# safely once it is told not to trust the schema; what remains is to check that the rows are what we wrote.
def _connect(path: str | Path, readonly: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True) if readonly else sqlite3.connect(str(path))
    # No SQL functions with side effects from views or triggers of the file; corrupt cells are detected.
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.execute("PRAGMA cell_size_check = ON")
    odd = conn.execute("SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger')").fetchall()
    if odd:
        conn.close()
        raise SelfEvolveError(f"{path}: not an experience pool written by selfevolve (it holds "
                              f"{', '.join(f'{t} {n!r}' for t, n in odd[:3])})")
    return conn


def _int_or(value, default: int) -> int:
    return int(value) if isinstance(value, str) and value.isascii() and value.isdecimal() and len(value) < 7 \
        else default


def _json(value, kind: type, what: str):
    data = loads_json(value) if isinstance(value, str) else None
    if not isinstance(data, kind):
        raise ValueError(f"{what} is not a JSON {kind.__name__}")
    return data


def _check_row(path, row_id, *, kind, text, key_text, intent, tools, turns, score, success, origin, task_id, env,
               info, embedding, key_embedding, dim: int | None, step=0) -> Item:
    """One row as an :class:`Item`, or a SelfEvolveError naming the file and row: every column of the type
    this module writes, JSON columns bounded (selfevolve/untrusted.py), embeddings of ``dim`` float32 values
    (any size when ``dim`` is None: they will be re-embedded)."""
    try:
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r} is not one of {KINDS}")
        for name, value in (("text", text), ("key_text", key_text), ("origin", origin), ("task_id", task_id),
                            ("env", env)):
            if not isinstance(value, str):
                raise ValueError(f"{name} is not text")
        if intent is not None and not isinstance(intent, str):
            raise ValueError("intent is not text")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not isinstance(success, int) \
                or not isinstance(step, int):
            raise ValueError("score, success or step is not a number")
        for name, blob in (("embedding", embedding), ("key_embedding", key_embedding)):
            if not isinstance(blob, bytes) or (dim is not None and len(blob) != 4 * dim):
                raise ValueError(f"{name} is not {dim} float32 values")
        tools_ = _json(tools, list, "tools")
        turns_ = _json(turns, list, "turns")
        if not all(isinstance(t, str) for t in tools_) or \
                not all(isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t) for t in turns_):
            raise ValueError("tools must be names and turns [observation, action] pairs")
        info_ = _json(info, dict, "info")
    except (ValueError, json.JSONDecodeError) as e:
        raise SelfEvolveError(f"{path}: row {row_id} is not an experience row written by selfevolve ({e})") from None
    return Item(id=row_id, kind=kind, text=text, key_text=key_text, intent=intent, tools=tools_,
                turns=[tuple(t) for t in turns_], score=float(score), success=bool(success), origin=origin,
                step=step, task_id=task_id, env=env, info=info_)
