"""``selfevolve view``: an offline viewer of a run folder (docs/viewer.md).

- ``record.py``: what training records for the viewer next to each logged trajectory;
- ``load.py``: reading a run folder that may come from anyone (malformed lines skipped and counted);
- ``fields.py``: one record of it rebuilt field by field into the page's shape;
- ``page.py``: one self-contained HTML file (data embedded as JSON, scripts and styles inline, no network);
- ``serve.py``: a standard-library HTTP server that sends each step's trajectories on demand (large runs);
- ``static/``: the page's plain JavaScript and CSS.
"""
