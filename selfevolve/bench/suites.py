"""What ``selfevolve bench SUITE_OR_LIST`` plays: named suites, lists of environment names, or a YAML file.

A named suite is a small, fixed set of games that run offline, with the settings that make them playable by a
small model (TextWorldExpress's coin on 3 rooms without doors, not its default 11 with doors). Items are
``{name, options}``; ``eval`` (optional) replaces the options evaluation adds (``split=test`` by default).
TowerOfHanoi starts the same position from every seed, so it is played on that one game (``split=all``) and the
table says it is not held out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from selfevolve.errors import ConfigError

SMALL_COIN = {"numLocations": 3, "includeDoors": 0, "numDistractorItems": 0}


@dataclass(frozen=True)
class Game:
    """One row of the table: an environment name, its options, and the options evaluation uses instead of the
    automatic ``split=test`` (None: automatic)."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    eval: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        return self.name + ("" if not self.options else " " + ",".join(f"{k}={v}" for k, v in self.options.items()))


SUITES: dict[str, list[Game]] = {
    "builtin": [Game("frozenlake"), Game("sokoban")],
    "textarena": [Game("textarena:FrozenLake-v0"), Game("textarena:GuessTheNumber-v0"),
                  Game("textarena:TowerOfHanoi-v0", {"split": "all"}, {"split": "all"})],
    "twx": [Game("twx:coin", {"config": SMALL_COIN}), Game("twx:simonsays"), Game("twx:arithmetic"),
            Game("twx:sorting")],
    "rg": [Game("rg:maze", {"retries": 2}), Game("rg:basic_arithmetic"), Game("rg:mini_sudoku")],
}


def games_of(spec: str) -> list[Game]:
    """The games of ``SUITE_OR_LIST``: a suite's name, a comma-separated list of suite and environment names,
    or a YAML file holding a list of environment names or ``{name, options, eval}`` mappings."""
    spec = spec.strip()
    if spec.endswith((".yaml", ".yml")):
        return _from_file(Path(spec))
    out: list[Game] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        out += SUITES.get(item.lower(), []) or [Game(item)]
    if not out:
        raise ConfigError(f"bench: no games in {spec!r}; name a suite ({', '.join(SUITES)}), environments "
                          f"separated by commas, or a YAML file")
    return out


def _from_file(path: Path) -> list[Game]:
    if not path.is_file():
        raise ConfigError(f"bench: suite file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: malformed YAML ({str(e).splitlines()[0][:200]})") from None
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{path}: a bench suite file is a list of environment names or {{name, options}} entries")
    games = []
    for k, item in enumerate(data):
        if isinstance(item, str):
            item = {"name": item}
        if not (isinstance(item, dict) and isinstance(item.get("name"), str)
                and isinstance(item.get("options", {}), dict) and isinstance(item.get("eval", {}), (dict, type(None)))
                and set(item) <= {"name", "options", "eval"}):
            raise ConfigError(f"{path}: entry {k + 1} must be a name or a mapping with name, options (a mapping) "
                              f"and eval (a mapping), got {item!r}")
        games.append(Game(item["name"], dict(item.get("options") or {}), item.get("eval")))
    return games
