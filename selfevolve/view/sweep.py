"""``selfevolve view OUT`` on a sweep folder (``selfevolve sweep``): one page with the seeds side by side.

The page holds the summary (per seed: held-out success before and after, gain, best step, wall time; across seeds:
mean ± std, median, min, seeds learned), the curves figure embedded as a ``data:`` image, and a link to each
seed's own viewer page (``seed-N/view.html``, written beside it). No script: the text is escaped and a
Content-Security-Policy allows nothing but its own stylesheet and ``data:`` images.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from pathlib import Path

from selfevolve.errors import SelfEvolveError

STYLE = ("body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:3px 9px;text-align:right}th{background:#f4f4f4}"
         "td:first-child{text-align:left}.no{color:#b00}.yes{color:#070}img{max-width:100%}")


def is_sweep(folder: Path) -> bool:
    """A sweep folder holds ``summary.json`` and ``seed-N`` run folders (a run folder holds ``config.yaml``)."""
    return (folder / "summary.json").is_file() and any(folder.glob("seed-*")) and not (folder / "config.yaml").exists()


def _pct(x) -> str:
    return "–" if not isinstance(x, (int, float)) else f"{100 * x:.1f} %"


def sweep_html(folder: Path) -> str:
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        per_seed = list(summary["per_seed"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SelfEvolveError(f"{folder / 'summary.json'} is not a sweep summary ({e})") from None
    esc = html.escape
    rows = []
    for r in per_seed:
        seed = int(r.get("seed", -1))
        gain = r.get("gain")
        learned = isinstance(gain, (int, float)) and gain >= summary.get("learned_gain", 0.2) - 1e-9
        page = folder / f"seed-{seed}" / "view.html"
        link = f'<a href="seed-{seed}/view.html">seed {seed}</a>' if page.is_file() else f"seed {seed}"
        rows.append(f"<tr><td>{link}</td><td>{_pct(r.get('before'))}</td><td>{_pct(r.get('after'))}</td>"
                    f"<td class=\"{'yes' if learned else 'no'}\">{'–' if gain is None else f'{100 * gain:+.1f}'}</td>"
                    f"<td>{_pct(r.get('best'))} ({esc(str(r.get('best_step')))})</td>"
                    f"<td>{esc(str(r.get('eval_tasks')))}</td><td>{esc(str(r.get('steps')))}</td>"
                    f"<td>{float(r.get('wall_s') or 0):.0f} s</td></tr>")
    after, gain = summary.get("after", {}), summary.get("gain", {})
    lines = [f"<b>{int(summary.get('learned', 0))} of {len(per_seed)} seeds learned</b> (held-out greedy success up "
             f"by at least {100 * float(summary.get('learned_gain', 0.2)):.0f} points)"]
    if isinstance(after.get("mean"), (int, float)):
        lines.append(f"held-out success after training: mean {_pct(after['mean'])} ± {_pct(after.get('std'))}, "
                     f"median {_pct(after.get('median'))}, min {_pct(after.get('min'))}, max {_pct(after.get('max'))}")
    if isinstance(gain.get("mean"), (int, float)):
        lines.append(f"gain: mean {100 * gain['mean']:+.1f} ± {100 * (gain.get('std') or 0):.1f} points")
    if summary.get("missing"):
        lines.append(f"not finished: seeds {esc(', '.join(map(str, summary['missing'])))}")
    image = ""
    if (folder / "curves.png").is_file():
        data = base64.b64encode((folder / "curves.png").read_bytes()).decode()
        image = f'<p><img alt="each seed: training success per step and held-out evaluations" src="data:image/png;base64,{data}"></p>'
    settings = " ".join(summary.get("overrides") or []) or "the defaults"
    style_hash = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
    csp = f"default-src 'none'; style-src 'sha256-{style_hash}'; img-src data:; base-uri 'none'; form-action 'none'"
    return (f'<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
            f'content="{csp}"><title>sweep {esc(folder.name)}</title><style>{STYLE}</style></head><body>'
            f"<h1>Sweep {esc(folder.name)}</h1><p>settings: <code>{esc(settings)}</code></p>"
            f"<p>{'<br>'.join(lines)}</p>{image}"
            "<table><tr><th>run</th><th>before</th><th>after</th><th>gain</th><th>best (step)</th>"
            "<th>held-out tasks</th><th>steps</th><th>wall time</th></tr>" + "".join(rows) + "</table></body></html>")


def write_sweep(folder: Path, out: Path | None = None) -> tuple[Path, int]:
    """The sweep page (``OUT/view.html``) and each finished seed's viewer page; returns (path, seeds linked)."""
    from selfevolve.view.load import load_run
    from selfevolve.view.page import write_html

    seeds = 0
    for run_dir in sorted(folder.glob("seed-*")):
        try:
            run = load_run(run_dir)
        except SelfEvolveError:  # a seed that never logged a step (it failed at its start): no page, no link
            continue
        write_html(run, run_dir / "view.html")
        seeds += 1
    target = out or folder / "view.html"
    target.write_text(sweep_html(folder), encoding="utf-8")
    return target, seeds
