"""Would ``evolve.keep=best`` have kept the best round of finished ``selfevolve evolve`` runs?

For each run folder: write the run's validation set with the committed ``evolve/validation.py``
(``validation.build`` with the run's own settings and seed, from ``round-0/train/config.yaml``, into
``OUT/RUN_NAME``: give runs distinct folder names), score every round's saved adapter on it
(``validation.score``), and set the kept round beside each round's held-out success from the run's
``evolve.json``. Training is not rerun: the validation set and its scores do not depend on anything a round does,
so this is what the loop itself would have kept. Runs made with ``evolve.keep=best`` already hold their scores;
this is for runs made before it.

    python benchmarks/bench_keep_best.py --runs runs/evolve-s3 runs/evolve-s4 --out runs/keep-best

Prints a markdown table and a final SUMMARY line: the held-out success kept against the last round's, per seed
and on average. One thread (``OMP_NUM_THREADS``) per process is what docs/evolve.md used, two runs at a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from selfevolve import load_config
from selfevolve.evolve.report import best_round
from selfevolve.build import build_policy, resolve_env
from selfevolve.evolve import validation
from selfevolve.train.checkpoint import load_init_adapter


def round_policy(cfg, run: Path, r: int):
    """``(config, policy)`` of round ``r`` of the evolve run ``run``: its saved adapter (``round-R/train``) loaded."""
    c = cfg.model_copy(update={"model": cfg.model.model_copy(update={"init_from": str(run / f"round-{r}" / "train")})})
    policy = build_policy(c)
    load_init_adapter(c, policy)
    return c, policy


def score_run(run: Path, out: Path) -> dict:
    """Score ``run``'s rounds on the validation set its own configuration writes (its round 0's, the seed and
    settings it ran with)."""
    state = json.loads((run / "evolve.json").read_text())
    cfg = load_config(str(run / "round-0" / "train" / "config.yaml"))  # validation uses the training split itself
    seed = cfg.seed
    env_cls = resolve_env(cfg, None)
    written = validation.build(cfg, env_cls, out)
    if not written.get("tasks"):
        raise SystemExit(f"{run}: no validation task ({written})")
    rounds = []
    for rec in state["rounds"]:
        r = rec["round"]
        c, policy = round_policy(cfg, run, r)
        rounds.append({"round": r, "validation": validation.score(c, env_cls, policy, out, written["tasks"]),
                       "held_out": rec["eval"]["eval/success"]})
        print(f"seed {seed} round {r}: validation {rounds[-1]['validation']['success']:.3f}, held out "
              f"{rounds[-1]['held_out']:.3f}", flush=True)
    k = best_round(rounds)
    result = {"run": str(run), "seed": seed, "validation": written, "rounds": rounds, "kept_round": k,
              "kept": rounds[k]["held_out"], "last": rounds[-1]["held_out"]}
    (out / "result.json").write_text(json.dumps(result, indent=1))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, nargs="+", required=True, help="finished selfevolve evolve run folders")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    results = [score_run(run, args.out / run.name) for run in args.runs]
    print("\n| seed | validation per round | held out per round | kept round | kept | last |")
    print("|---|---|---|---|---|---|")
    for r in results:
        val = " / ".join(f"{x['validation']['success']:.3f}" for x in r["rounds"])
        held = " / ".join(f"{x['held_out']:.3f}" for x in r["rounds"])
        print(f"| {r['seed']} | {val} | {held} | {r['kept_round']} | {r['kept']:.3f} | {r['last']:.3f} |")
    kept, last = [r["kept"] for r in results], [r["last"] for r in results]
    print(f"SUMMARY keep=best: held out {statistics.mean(kept):.3f} kept against {statistics.mean(last):.3f} last "
          f"({len(results)} runs; kept round = best held-out round on "
          f"{sum(r['kept'] == max(x['held_out'] for x in r['rounds']) for r in results)} of {len(results)})")


if __name__ == "__main__":
    main()
