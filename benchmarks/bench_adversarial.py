"""How long the worst input takes: every registered environment's step and every parser of model text, on the
committed adversarial corpus (megabyte replies included) and on many random adversarial actions.

Counts exceptions (the contract is zero: tests/adversarial.py's checks) and reports the slowest call per
environment and parser, against the stated bound (docs/security.md). Run from the repository root:

    python benchmarks/bench_adversarial.py --random 2000

Prints a table and, last, one summary line.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from adversarial import PARSERS, check_step, corpus, random_action  # noqa: E402
from selfevolve.envs import ENVS, make_env  # noqa: E402

BOUND_MS = 100.0  # the stated bound for one step or parse of any input up to a megabyte (docs/security.md)


def timed(fn, text: str) -> tuple[float, str | None]:
    t0 = time.perf_counter()
    try:
        fn(text)
        problem = None
    except Exception as e:  # noqa: BLE001 - counting every kind is the point
        problem = f"{type(e).__name__}: {str(e)[:120]}"
    return (time.perf_counter() - t0) * 1000, problem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", type=int, default=2000, help="random adversarial actions per env and parser")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cases = corpus()
    rng = random.Random(args.seed)
    randoms = [(f"random-{i}", random_action(rng)) for i in range(args.random)]
    inputs = cases + randoms
    targets = {}
    for name in sorted(ENVS):
        env = make_env(name)

        def step(text, env=env, k=[0]):
            k[0] += 1
            env.reset(k[0] % 50)  # reset is outside the contract's cost but cheap; timed with the step
            check_step(env, text)

        targets[f"env {name}"] = step
    targets.update({f"parser {k}": v for k, v in sorted(PARSERS.items())})

    total_calls, total_errors, worst = 0, 0, (0.0, "", "")
    print(f"{'target':34s} {'calls':>6s} {'errors':>6s} {'median ms':>10s} {'p99 ms':>8s} {'max ms':>8s}  slowest")
    for label, fn in targets.items():
        times, errors, slowest = [], [], (0.0, "")
        for case, text in inputs:
            ms, problem = timed(fn, text)
            times.append(ms)
            if problem:
                errors.append(f"{case}: {problem}")
            if ms > slowest[0]:
                slowest = (ms, case)
        times.sort()
        total_calls += len(times)
        total_errors += len(errors)
        if slowest[0] > worst[0]:
            worst = (slowest[0], label, slowest[1])
        print(f"{label:34s} {len(times):6d} {len(errors):6d} {times[len(times) // 2]:10.3f} "
              f"{times[int(len(times) * 0.99)]:8.2f} {slowest[0]:8.2f}  {slowest[1]}")
        for e in errors[:3]:
            print(f"    {e}")
    print(f"bench_adversarial: {total_errors} exceptions in {total_calls} calls "
          f"({len(cases)} corpus cases + {len(randoms)} random actions, each on {len(ENVS)} envs and "
          f"{len(PARSERS)} parsers); slowest {worst[0]:.1f} ms ({worst[1]}, {worst[2]}); "
          f"bound {BOUND_MS:.0f} ms: {'met' if worst[0] <= BOUND_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
