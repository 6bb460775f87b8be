"""How long the ``selfevolve`` command takes to answer ``--help``: the whole process, from start to exit.

Each command runs ``--repeats`` times in a fresh Python process (``python -m selfevolve.cli ...``, what the
installed ``selfevolve`` script runs), alternated, and the median and fastest wall times are printed, beside
``python -c pass`` (the interpreter's own start) and ``python -c "import torch"`` (what one heavy import costs).

    python benchmarks/bench_cli_help.py                # 5 repeats
    python benchmarks/bench_cli_help.py --repeats 10
    python benchmarks/bench_cli_help.py --root /path/to/other/checkout   # e.g. the code before a change
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "python -c 'import torch'": ["-c", "import torch"],
    "selfevolve --help": ["-m", "selfevolve.cli", "--help"],
    "selfevolve train --help": ["-m", "selfevolve.cli", "train", "--help"],
    "selfevolve view --help": ["-m", "selfevolve.cli", "view", "--help"],
}


def wall(args: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, cwd=env["PYTHONPATH"], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose selfevolve is timed")
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(a.root.resolve()), "COLUMNS": "100"}
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for name, args in COMMANDS.items():  # once each first: the files into the page cache
        wall(args, env)
    for _ in range(a.repeats):
        for name, args in COMMANDS.items():
            times[name].append(wall(args, env))
    for name, ts in times.items():
        print(f"{name:28s} median {statistics.median(ts):.3f} s  fastest {min(ts):.3f} s  ({a.repeats} runs)")
    med = {name: statistics.median(ts) for name, ts in times.items()}
    torch_s = med["python -c 'import torch'"]
    print(f"SUMMARY selfevolve --help {med['selfevolve --help']:.2f} s median (train --help "
          f"{med['selfevolve train --help']:.2f} s; python start {med['python -c pass']:.2f} s, import torch "
          f"{torch_s:.2f} s)")


if __name__ == "__main__":
    main()
