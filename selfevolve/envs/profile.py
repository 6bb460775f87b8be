"""Environment profiles: what a world is about, as plain data.

Why: self-questioning (AgentEvolver) invents new tasks by exploring a world from a description of it — its
entities and their attributes, the operations available, the rules and some background. A profile is that
description, kept as data (dataclasses with a JSON form) so a later feature can read it, show it to a model
or store it, without importing the world's code. A tool world's operations are read off its tool schemas
(``envs/tools/base.operations``), so its profile cannot drift from its tools; a game's are its moves.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entity:
    name: str
    description: str
    attributes: tuple[str, ...]


@dataclass(frozen=True)
class Operation:
    name: str
    description: str
    parameters: tuple[str, ...]
    writes: bool  # whether it changes the world


@dataclass(frozen=True)
class EnvProfile:
    """A world described as data: entities, operations, rules, background text and the task intents."""

    name: str
    background: str
    entities: tuple[Entity, ...]
    operations: tuple[Operation, ...]
    rules: tuple[str, ...] = ()
    intents: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))  # tuples become lists: the JSON form

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EnvProfile":
        return cls(
            name=data["name"], background=data["background"],
            entities=tuple(Entity(e["name"], e["description"], tuple(e["attributes"])) for e in data["entities"]),
            operations=tuple(Operation(o["name"], o["description"], tuple(o["parameters"]), bool(o["writes"]))
                             for o in data["operations"]),
            rules=tuple(data.get("rules", ())), intents=tuple(data.get("intents", ())),
            extra=dict(data.get("extra", {})))
