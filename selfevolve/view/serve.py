"""``selfevolve view RUN --serve``: the viewer over HTTP, for runs too large for one file.

The page is the same; only its data source differs: the server sends the summary with the page and each step's
trajectories and search trees when the page asks for them (``/data/steps/N.json``, ``/data/trees/N.json``,
and an evaluation's episodes, ``/data/evals/K.json``),
so the browser never holds more than the steps that were opened; a text search runs here
(``/data/search.json?q=...``: the matching ``[step, index]`` pairs) instead of sending every step. Standard
library only (``http.server``); it binds to 127.0.0.1 by default and serves nothing but these paths.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from selfevolve.view.load import RunData, searchable
from selfevolve.view.page import assets, build_html, content_policy, script_json

DATA = re.compile(r"^/data/(steps|trees|evals)/(-?\d{1,12})\.json$")


def make_handler(run: RunData):
    page = build_html(run, serve=True).encode("utf-8", errors="replace")
    policy = content_policy(*assets())

    texts: dict[tuple[int, int], str] = {}  # (step, index) -> searchable text, built on the first search

    def search(q: str) -> bytes:
        if not texts:
            texts.update({(s, i): searchable(t) for s, ts in run.steps.items() for i, t in enumerate(ts)})
        q = q.lower()
        return json.dumps([list(k) for k, v in texts.items() if q in v]).encode()

    @lru_cache(maxsize=64)  # a search asks for every step in turn; revisits are served without re-encoding
    def data(kind: str, step: int) -> bytes:
        store = {"steps": run.steps, "trees": run.trees, "evals": run.evals}[kind]
        return script_json(store.get(step, [])).encode("utf-8", errors="replace")

    class Handler(BaseHTTPRequestHandler):
        server_version = "selfevolve-view"

        def _send(self, code: int, body: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Security-Policy", policy)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - the http.server hook
            url = urlsplit(self.path)
            path = url.path
            if path in ("/", "/index.html"):
                return self._send(200, page, "text/html; charset=utf-8")
            if path == "/data/search.json":
                q = parse_qs(url.query).get("q", [""])[0][:1000]
                return self._send(200, search(q), "application/json")
            m = DATA.match(path)
            if m is None:
                return self._send(404, b"not found", "text/plain; charset=utf-8")
            return self._send(200, data(m.group(1), int(m.group(2))), "application/json")

        do_HEAD = do_GET

        def log_message(self, format, *args) -> None:  # noqa: A002 - quiet: one line per request is noise
            pass

    return Handler


def make_server(run: RunData, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """A server for ``run`` (``port=0``: any free port; see ``server.server_address``)."""
    return ThreadingHTTPServer((host, port), make_handler(run))
