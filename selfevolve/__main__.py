"""``python -m selfevolve``: the ``selfevolve`` command (mimalloc preloaded first: ``launch.py``)."""

from selfevolve.launch import main

main()
