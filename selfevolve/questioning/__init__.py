"""AgentEvolver self-questioning (seed 004, ``shared/design/methods.md`` §7): the agent explores a world that
comes without tasks, writes its own training tasks with reference solutions, and keeps those that execute.

- :mod:`~selfevolve.questioning.explore` — curiosity-driven exploration (breadth, then depth; myopic window);
- :mod:`~selfevolve.questioning.synthesize` — the task writer (an LLM call; a labelled template fallback);
- :mod:`~selfevolve.questioning.filters` — parse, dedup, empty reference, held-out, execution, verification;
- :mod:`~selfevolve.questioning.pipeline` — ``selfevolve explore``: all of it, with a report;
- :mod:`~selfevolve.questioning.grid` (exploring) and :mod:`~selfevolve.questioning.grid_tasks` (writing, filters,
  the run) — the same for grid games, with their own pieces in
  :mod:`~selfevolve.questioning.games` (FrozenLake) and :mod:`~selfevolve.questioning.sokoban` (Sokoban).
"""
