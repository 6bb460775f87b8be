"""``selfevolve view RUN --serve``: the viewer over HTTP, for runs too large for one file.

The page is the same; only its data source differs: the server sends the summary with the page and each step's
trajectories and search trees when the page asks for them (``/data/steps/N.json``, ``/data/trees/N.json``),
so the browser never holds more than the steps that were opened. Standard library only
(``http.server``); it binds to 127.0.0.1 by default and serves nothing but these three kinds of path.
"""

from __future__ import annotations

import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from selfevolve.view.load import RunData
from selfevolve.view.page import assets, build_html, content_policy, script_json

DATA = re.compile(r"^/data/(steps|trees)/(-?\d{1,12})\.json$")


def make_handler(run: RunData):
    page = build_html(run, serve=True).encode("utf-8", errors="replace")
    policy = content_policy(*assets())

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
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                return self._send(200, page, "text/html; charset=utf-8")
            m = DATA.match(path)
            if m is None:
                return self._send(404, b"not found", "text/plain; charset=utf-8")
            store = run.steps if m.group(1) == "steps" else run.trees
            body = script_json(store.get(int(m.group(2)), [])).encode("utf-8", errors="replace")
            return self._send(200, body, "application/json")

        do_HEAD = do_GET

        def log_message(self, format, *args) -> None:  # noqa: A002 - quiet: one line per request is noise
            pass

    return Handler


def make_server(run: RunData, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """A server for ``run`` (``port=0``: any free port; see ``server.server_address``)."""
    return ThreadingHTTPServer((host, port), make_handler(run))
