"""The viewer as one self-contained HTML file: the page's script and styles inline, the run's data embedded.

The data go into ``<script type="application/json">`` blocks, which the browser never executes: the run summary
(parsed at load) and one block per step, per step's search trees and per evaluation (parsed the first time a view needs that
step, so a run of 10,000 trajectories opens as fast as its summary parses). JSON text is made safe for the
inside of a ``<script>`` element by escaping ``<``, ``>`` and ``&`` (so ``</script>`` in a reply cannot end
the block) and U+2028/U+2029.

A Content-Security-Policy in the page allows exactly its own script and stylesheet (by SHA-256), no other
script, no network except the page's own origin (``--serve``) and no images but ``data:`` ones: even text that
escaped the DOM's escaping could not run or load anything.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from importlib import resources

from selfevolve.view.load import RunData

SCRIPTS = ("core.js", "summary.js", "trajectory.js", "evals.js", "tree.js")


def _static(name: str) -> str:
    return resources.files("selfevolve.view").joinpath("static", name).read_text(encoding="utf-8")


def script_json(data) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element (and still valid JSON)."""
    s = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (s.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def assets() -> tuple[str, str]:
    """The page's script (its files in one strict-mode function, started by ``render()``) and stylesheet."""
    body = "\n".join(_static(name) for name in SCRIPTS)
    return f"(() => {{\n{body}\nrender();\n}})();\n", _static("viewer.css")


def content_policy(script: str, style: str) -> str:
    return (f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; img-src data:; "
            "connect-src 'self'; base-uri 'none'; form-action 'none'")


def build_html(run: RunData, serve: bool = False) -> str:
    """The page of ``run``. ``serve``: the steps are not embedded; the page fetches them from the server."""
    script, style = assets()
    summary = {**run.summary, "mode": "serve" if serve else "file"}
    blocks = [f'<script type="application/json" id="run-data">{script_json(summary)}</script>']
    if not serve:
        for s, trajs in sorted(run.steps.items()):
            blocks.append(f'<script type="application/json" id="steps-{s}">{script_json(trajs)}</script>')
        for s, trees in sorted(run.trees.items()):
            blocks.append(f'<script type="application/json" id="trees-{s}">{script_json(trees)}</script>')
        for k, trajs in sorted(run.evals.items()):
            blocks.append(f'<script type="application/json" id="evals-{k}">{script_json(trajs)}</script>')
    return "\n".join([
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{content_policy(script, style)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>selfevolve view · {html.escape(str(run.summary['name']))}</title>",
        f"<style>{style}</style>",
        "</head><body>",
        '<div id="app"><p>Loading… (this page needs JavaScript)</p></div>',
        *blocks,
        f"<script>{script}</script>",
        "</body></html>",
        "",
    ])


def write_html(run: RunData, path) -> int:
    """Write the self-contained page to ``path``; returns its size in bytes. Text that cannot be UTF-8 (a lone
    surrogate from a crafted file) is replaced, never an error."""
    data = build_html(run).encode("utf-8", errors="replace")
    with open(path, "wb") as f:
        f.write(data)
    return len(data)
