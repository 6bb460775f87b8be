"""How fast ``selfevolve view`` opens a run in a real browser: a default-size run and a 10,000-trajectory one.

For each run: the time to load the run folder and write the page (Python), the page's size, and in headless
Chromium, for three views:

- ``summary``: what opens first (config, metric curves, evaluations, the steps table);
- ``trajectory``: one trajectory of the last step, tokens coloured (parses only that step's data);
- ``search``: a text search over every trajectory of the run (parses every step; fetches every step when
  served).

and the same summary and trajectory views from ``selfevolve view --serve`` (the page fetches each step from the
server). Per view: ``ready``, the time from navigation start until the view is on screen (the page records
``performance.now()`` then, as ``data-ready-ms`` on ``<html>``; for a single-file page this includes parsing the
whole HTML file), ``render``, the time the view itself took (``data-render-ms``: what switching to it costs once
the page is open), and ``browser``, the wall time of a whole Chromium process that opens the view, paints it and
takes a screenshot (start-up included). Each figure is the median of ``--repeats`` fresh browser starts.
Chromium runs without a virtual time budget for file pages, so ``performance.now()`` is wall-clock time
(``--dump-dom`` prints the DOM after the load event, and file views render before it); served views fetch their
step after the load event, so they get a budget and their ready/render times are the browser's virtual time
(their ``browser`` wall time is the honest figure).

The 10,000-trajectory run is synthesized from the given run: its trajectories repeated under new step numbers
(with a metrics line per step), so each trajectory is as large as a real one.

    python benchmarks/bench_viewer.py RUN              # RUN: a default-size run (20 steps x 32 trajectories)
    python benchmarks/bench_viewer.py RUN --big 10000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from selfevolve.view.load import load_run
from selfevolve.view.page import write_html
from selfevolve.view.serve import make_server

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def synthesize(src: Path, dst: Path, n: int) -> None:
    """``dst``: ``n`` trajectories made of ``src``'s, renumbered into steps of the same size."""
    lines = [line for line in (src / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    per_step = sum(1 for line in lines if json.loads(line)["step"] == json.loads(lines[0])["step"])
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "config.yaml", dst / "config.yaml")
    metrics = [json.loads(line) for line in (src / "metrics.jsonl").read_text().splitlines()]
    with (dst / "trajectories.jsonl").open("w") as f, (dst / "metrics.jsonl").open("w") as m:
        for k in range(n):
            rec = json.loads(lines[k % len(lines)])
            rec["step"] = k // per_step + 1
            f.write(json.dumps(rec) + "\n")
            if k % per_step == 0:
                m.write(json.dumps({**metrics[1 + (k // per_step) % (len(metrics) - 1)], "step": rec["step"]}) + "\n")


def attr(head: str, name: str) -> int:
    if f'{name}="' not in head:
        raise RuntimeError(f"the page did not render before the DOM was dumped (no {name})")
    return int(head.split(f'{name}="')[1].split('"')[0])


def open_once(url: str, budget: int | None = None) -> tuple[int, int, float]:
    """(data-ready-ms, data-render-ms, wall seconds of a screenshot process), from two fresh Chromium starts."""
    extra = [f"--virtual-time-budget={budget}"] if budget else []
    with tempfile.TemporaryDirectory() as profile:
        head = subprocess.run(["chromium", *FLAGS, f"--user-data-dir={profile}", *extra, "--dump-dom", url],
                              capture_output=True, text=True, timeout=300).stdout[:400]
    with tempfile.TemporaryDirectory() as profile:
        t0 = time.perf_counter()
        subprocess.run(["chromium", *FLAGS, f"--user-data-dir={profile}", *extra, "--window-size=1280,800",
                        f"--screenshot={profile}/shot.png", url], capture_output=True, timeout=300, check=True)
        wall = time.perf_counter() - t0
    return attr(head, "data-ready-ms"), attr(head, "data-render-ms"), wall


def median(url: str, repeats: int, budget: int | None = None) -> tuple[float, float, float]:
    runs = [open_once(url, budget) for _ in range(repeats)]
    return tuple(statistics.median(r[k] for r in runs) for k in range(3))


def measure(run_dir: Path, repeats: int, out: Path) -> dict:
    t0 = time.perf_counter()
    run = load_run(run_dir)
    t1 = time.perf_counter()
    size = write_html(run, out)
    t2 = time.perf_counter()
    steps = run.summary["steps"]
    word = run.steps[steps[-1]][0]["turns"][0]["action"].strip()[:6] or "Down"
    url = out.resolve().as_uri()
    res = {"trajectories": len(run.summary["index"]), "steps": len(steps), "jsonl_mb":
           (run_dir / "trajectories.jsonl").stat().st_size / 1e6, "load_s": t1 - t0, "write_s": t2 - t1,
           "html_mb": size / 1e6}
    res["summary"] = median(url, repeats)
    res["trajectory"] = median(f"{url}#/traj/{steps[-1]}/0?tok=entropy", repeats)
    res["search"] = median(f"{url}#/list?q={word}", repeats)
    server = make_server(run, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        # served views fetch their step after the load event: a virtual time budget lets --dump-dom wait for it
        # (performance.now() is then virtual time; the browser's wall time is the honest figure)
        res["serve_summary"] = median(base, repeats, budget=5000)
        res["serve_trajectory"] = median(f"{base}#/traj/{steps[-1]}/0?tok=entropy", repeats, budget=5000)
        res["serve_search"] = median(f"{base}#/list?q={word}", repeats, budget=60_000)
    finally:
        server.shutdown()
        server.server_close()
    return res


def show(name: str, r: dict) -> None:
    print(f"{name}: {r['trajectories']} trajectories in {r['steps']} steps, trajectories.jsonl {r['jsonl_mb']:.1f} MB;"
          f" load {r['load_s']:.2f} s, page written in {r['write_s']:.2f} s ({r['html_mb']:.1f} MB)")
    for view in ("summary", "trajectory", "search", "serve_summary", "serve_trajectory", "serve_search"):
        ready, render, wall = r[view]
        print(f"  {view:17s} ready {ready:6.0f} ms · render {render:5.0f} ms · browser {wall:4.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a default-size run folder")
    ap.add_argument("--big", type=int, default=10_000, help="trajectories of the synthesized large run")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small = measure(args.run, args.repeats, tmp / "default.html")
        show(f"default run {args.run}", small)
        synthesize(args.run, tmp / "big", args.big)
        big = measure(tmp / "big", args.repeats, tmp / "big.html")
        show(f"synthesized run ({args.big} trajectories)", big)
    print(f"SUMMARY viewer: default run ({small['trajectories']} trajectories, {small['html_mb']:.1f} MB page) ready "
          f"in {small['summary'][0]:.0f} ms (browser {small['summary'][2]:.1f} s); {big['trajectories']} trajectories "
          f"({big['html_mb']:.0f} MB page) ready in {big['summary'][0]:.0f} ms (browser {big['summary'][2]:.1f} s), a "
          f"trajectory view renders in {big['trajectory'][1]:.0f} ms, a search over all in {big['search'][1]:.0f} ms; "
          f"--serve: browser {big['serve_summary'][2]:.1f} s, a search over all {big['serve_search'][2]:.1f} s")


if __name__ == "__main__":
    main()
