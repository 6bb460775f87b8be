"""Task files: the JSONL form of requests (``types.Task``) that the tool worlds ship and read, and that
self-questioning writes for every environment (``env.tasks_file``, ``selfevolve explore``).

Why here, beside the protocol: the games and the tool worlds both read these files and share their splits, so
neither imports the other for them (``docs/architecture.md``).
"""

from __future__ import annotations

import json
from typing import Any

from selfevolve.errors import ConfigError
from selfevolve.types import Task

# A task's split: the environment's own training and held-out tasks, and tasks written by self-questioning
# (selfevolve/questioning/), which are training tasks kept apart so that a run can use them alone or mixed.
SPLITS = ("train", "test", "synth")

# A request's fields: ``goal`` is what the environment checks at the end — for a tool world ``{"answer": <expected
# or None>, ...}`` plus whatever the world checks besides (the shop adds ``"changes"``, the exact database rows the
# episode must change); ``solution`` is a reference list of actions (a tool world's calls ``[{"name": ...,
# "arguments": {...}}, ...]`` ending with ``finish``), and following it solves the task (a test replays every
# shipped task).
TASK_FILE_FIELDS = ("id", "split", "level", "intent", "instruction", "goal", "solution")  # a task file's line


def load_tasks(path: str) -> list[Task]:
    """Tasks from a JSONL file, one object of :data:`TASK_FILE_FIELDS` per line (blank lines skipped). A file that is
    missing, unreadable or holds a line that is not a task is a ConfigError naming it (``env.tasks_file``)."""
    tasks = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    tasks.append(task_from_line(json.loads(line)))
                except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
                    raise ConfigError(f"tasks_file {path!r}, line {n}: not a task ({type(e).__name__}: "
                                      f"{str(e)[:200]})") from None
    except FileNotFoundError:
        raise ConfigError(f"tasks_file {path!r}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"tasks_file {path!r} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    return tasks


def task_from_line(data: dict[str, Any]) -> Task:
    """The task of one line of a task file (a KeyError when a field is missing)."""
    return Task(**{k: data[k] for k in TASK_FILE_FIELDS})


def save_tasks(tasks: list[Task], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps({k: getattr(t, k) for k in TASK_FILE_FIELDS}, ensure_ascii=False) + "\n")
