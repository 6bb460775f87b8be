"""The grid games: FrozenLake (``frozenlake.py``, on gymnasium's maps, drawn in ``frozenlake_maps.py``) and Sokoban
(``sokoban.py``, rooms generated and solved in ``sokoban_rooms.py``), the parsing of their move answers
(``moves.py``), and the tasks self-questioning writes for them (``*_tasks.py``, ``game_tasks.py``)."""

from selfevolve.envs.games.frozenlake import FrozenLakeEnv
from selfevolve.envs.games.sokoban import SokobanEnv, solve

__all__ = ["FrozenLakeEnv", "SokobanEnv", "solve"]
