"""``evolve.acting_precision``: the loop's generation that trains nothing (exploring, and by the same path the
validation score and an evaluation) in the model's own fp32 products against the update's bf16 ones
(``model.matmul_dtype=bf16_update``'s copy, ``Policy.updating``), alternated in one process on one policy.

Each repeat times, in each precision, round 0's exploration of ``selfevolve evolve`` (``questioning.explorations``
explorations of ``questioning.steps`` masked turns, seed 0, the untrained policy) and one greedy held-out evaluation
of the same policy (the test split, ``eval.episodes`` maps). The untrained model never reaches a goal, so every
evaluation episode runs to the turn limit: the longest evaluation a run has. Needs a CPU with bf16 arithmetic for
a difference (elsewhere ``bf16_update`` is emulated and slower).

    OMP_NUM_THREADS=1 python benchmarks/bench_acting_precision.py --repeats 2

Prints one line per measurement and a final SUMMARY line with the fp32 ÷ bf16 ratios (medians over the repeats).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time

from selfevolve.build import build_policy
from selfevolve.config import load_config
from selfevolve.evolve import hindsight
from selfevolve.evolve.loop import Evolver
from selfevolve.train.checkpoint import load_init_adapter


def main(argv=None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("overrides", nargs="*", help="config overrides (env.name=frozenlake is the default here)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-acting-") as out:
        return measure(args, out)


def measure(args, out: str) -> dict[str, float]:
    cfg = load_config(None, ["env.name=frozenlake", "seed=0", "model.matmul_dtype=bf16_update",
                             "train.progress=false", f"train.out_dir={out}", *args.overrides])
    evolver = Evolver(cfg)
    policy = build_policy(evolver.cfg)  # with the update's bf16 copy of the frozen body's weights
    load_init_adapter(evolver.cfg, policy)
    builder = evolver._builder(policy)
    times: dict[str, list[float]] = {}
    for rep in range(args.repeats):
        for name in ("fp32", "bf16"):
            with policy.updating() if name == "bf16" else contextlib.nullcontext():
                t0 = time.perf_counter()
                hindsight.explore_round(evolver.cfg, evolver.env_cls, policy, builder, first_seed=0, seed=0)
                explore = time.perf_counter() - t0
                t0 = time.perf_counter()
                success = evolver._evaluate(policy)["eval/success"]
                evaluation = time.perf_counter() - t0
            times.setdefault(f"explore {name}", []).append(explore)
            times.setdefault(f"evaluate {name}", []).append(evaluation)
            print(f"repeat {rep}: {name} exploring {explore:.1f} s, held-out evaluation {evaluation:.1f} s "
                  f"(success {success:.3f})", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = {stage: med[f"{stage} fp32"] / med[f"{stage} bf16"] for stage in ("explore", "evaluate")}
    print(f"SUMMARY acting precision ({args.repeats} repeats, medians): exploring {med['explore fp32']:.1f} s fp32 "
          f"/ {med['explore bf16']:.1f} s bf16 = {ratios['explore']:.2f}x, held-out evaluation "
          f"{med['evaluate fp32']:.1f} / {med['evaluate bf16']:.1f} s = {ratios['evaluate']:.2f}x")
    return ratios


if __name__ == "__main__":
    main()
