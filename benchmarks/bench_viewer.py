"""How fast ``selfevolve view`` opens a run in a real browser: a default-size run and a 10,000-trajectory one.

For each run: the time to load the run folder and write the page (Python) and the page's size; then, in headless
Chromium driven over its DevTools pipe (``--remote-debugging-pipe``; standard library only), wall-clock times
measured here, not by the page:

- ``open``: from ``Page.navigate`` until the first view is on screen and the page answers (the page marks
  ``data-ready`` on ``<html>`` when a view is rendered; it is polled with ``Runtime.evaluate``, which runs only
  when the page's main thread is free, so "ready" also means "responsive");
- ``trajectory``: in the open page, switching to one trajectory of the last step (its tokens coloured: the
  step's data are parsed then, not before);
- ``search``: in the open page, a text search over every trajectory (parses every step; with ``--serve`` the
  server searches);
- ``back``: switching back to the summary.

for the single-file page and for ``selfevolve view --serve``. Each figure is the median of ``--repeats`` fresh
browsers.

The 10,000-trajectory run is synthesized from the given run: its trajectories repeated under new step numbers
(with a metrics line per step), so each trajectory is as large as a real one.

    python benchmarks/bench_viewer.py RUN              # RUN: a default-size run (20 steps x 32 trajectories)
    python benchmarks/bench_viewer.py RUN --big 10000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
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


class Browser:
    """A headless Chromium on the DevTools pipe: it reads NUL-terminated JSON commands on fd 3 and answers on fd 4."""

    def __init__(self):
        self.profile = tempfile.mkdtemp()
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()

        def fds():  # in the child: the pipe ends on 3 and 4 (via high numbers, so that neither overwrites the other)
            os.dup2(to_r, 100)
            os.dup2(from_w, 101)
            os.dup2(100, 3)
            os.dup2(101, 4)

        self.proc = subprocess.Popen(["chromium", *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
                                      "about:blank"], preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self.buf, self.next_id = b"", 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def call(self, method: str, session: bool = False, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed its DevTools pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", session=True, expression=expression,
                         returnByValue=True)["result"].get("value")

    def wait_ready(self, ticket: int, timeout: float = 120) -> None:
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            # None while the page is being replaced (the evaluation's context went away)
            if (self.evaluate("Number(document.documentElement.dataset.ready || 0)") or 0) >= ticket:
                return
            time.sleep(0.005)
        raise RuntimeError("the view did not render in time")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self.to_w)
        os.close(self.from_r)
        shutil.rmtree(self.profile, ignore_errors=True)


def session(url: str, views: list[str]) -> list[float]:
    """Wall seconds: opening ``url``, then switching to each of ``views`` (location hashes) in the open page."""
    b = Browser()
    try:
        t0 = time.perf_counter()
        b.call("Page.navigate", session=True, url=url)
        b.wait_ready(1)
        out = [time.perf_counter() - t0]
        for k, view in enumerate(views, start=2):
            t0 = time.perf_counter()
            b.evaluate(f"location.hash = {json.dumps(view)}")
            b.wait_ready(k)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        b.close()


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


def medians(url: str, views: list[str], repeats: int) -> list[float]:
    runs = [session(url, views) for _ in range(repeats)]
    return [statistics.median(r[k] for r in runs) for k in range(len(views) + 1)]


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
    views = [f"#/traj/{steps[-1]}/0?tok=entropy", f"#/list?q={word}", "#/"]
    res["file"] = medians(url, views, repeats)
    server = make_server(run, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        res["serve"] = medians(f"http://127.0.0.1:{server.server_address[1]}/", views, repeats)
    finally:
        server.shutdown()
        server.server_close()
    return res


def show(name: str, r: dict) -> None:
    print(f"{name}: {r['trajectories']} trajectories in {r['steps']} steps, trajectories.jsonl {r['jsonl_mb']:.1f} MB;"
          f" load {r['load_s']:.2f} s, page written in {r['write_s']:.2f} s ({r['html_mb']:.1f} MB)")
    for mode in ("file", "serve"):
        o, t, q, back = (1000 * x for x in r[mode])
        print(f"  {mode:5s}  open {o:6.0f} ms · trajectory {t:5.0f} ms · search {q:5.0f} ms · back {back:5.0f} ms")


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
    def ms(r, mode, k):
        return f"{1000 * r[mode][k]:.0f} ms"

    print(f"SUMMARY viewer: default run ({small['trajectories']} trajectories, {small['html_mb']:.1f} MB page) opens in "
          f"{ms(small, 'file', 0)}; {big['trajectories']} trajectories ({big['html_mb']:.0f} MB page) open in "
          f"{ms(big, 'file', 0)}, a trajectory in {ms(big, 'file', 1)}, a search over all in {ms(big, 'file', 2)}; "
          f"with --serve in {ms(big, 'serve', 0)}, {ms(big, 'serve', 1)}, {ms(big, 'serve', 2)}")

if __name__ == "__main__":
    main()
