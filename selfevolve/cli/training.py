"""``selfevolve train``, ``sweep`` and ``eval``: train a run, train one per seed, measure a run on held-out tasks."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from selfevolve.cli.base import HELP_OPTIONS, app, err, fail, out, quiet_libraries, with_config
from selfevolve.cli_help import Command, ConfigCommand
from selfevolve.train.signals import exit_code

TRAIN_HELP = """Train a policy. Options come from defaults, then FILE.yaml (optional), then KEY=VALUE overrides
(dotted keys, YAML values), e.g.:

    selfevolve train model.name=tiny train.steps=5 env.size=3

All configuration keys are listed below, by section."""


@app.command(
    cls=ConfigCommand,
    help=TRAIN_HELP,
    short_help="Train a policy (defaults, then FILE.yaml, then KEY=VALUE overrides).",
    context_settings=HELP_OPTIONS,
)
def train(args: list[str] = typer.Argument(None, metavar="[FILE.yaml] [KEY=VALUE ...]")) -> None:
    def run(cfg):
        from selfevolve.train.trainer import Trainer

        return Trainer(cfg, console=err).train()

    start = time.monotonic()
    cfg, _ = with_config(args, run)
    from selfevolve.train.metrics import peak_rss_gb
    from selfevolve.train.progress import final_sentence

    sentence = final_sentence(Path(cfg.train.out_dir), cfg.seed, cfg.eval.episodes, time.monotonic() - start,
                              peak_rss_gb())
    out.print(sentence, highlight=False, markup=False, soft_wrap=True)  # one line, whatever the width


SWEEP_HELP = """Train the same configuration once per seed and summarise the seeds together: OUT/seed-N/ holds each
run (train.resume=true: an interrupted seed continues, a finished one is skipped); OUT/summary.md, summary.json
and curves.png give held-out success before and after per seed, mean ± std, median, min, and how many seeds
learned. Options as for train, plus:

\b
  sweep.seeds=0-9         seeds to train (0-9, 0,3,7 or 5); `seeds=` is the same
  sweep.parallel=1        runs at a time (each its own process; a GPU or a big machine takes several)
  sweep.out_dir=runs/sweep
  sweep.learned_gain=0.2  a seed learned when held-out success rose by at least this

\b
Example:  selfevolve sweep seeds=0-9 sweep.out_dir=runs/sweep-default"""


@app.command(
    help=SWEEP_HELP,
    short_help="Train once per seed (sweep.seeds=0-9) and summarise across seeds.",
    context_settings=HELP_OPTIONS,
)
def sweep(args: list[str] = typer.Argument(None, metavar="[FILE.yaml] [KEY=VALUE ...]")) -> None:
    from selfevolve.errors import SelfEvolveError
    from selfevolve.sweep import make_spec, run_sweep

    quiet_libraries()
    try:
        spec = make_spec(args or [])
        summary = run_sweep(spec, console=err)
    except SelfEvolveError as e:
        fail(str(e))
    except KeyboardInterrupt as stop:
        raise typer.Exit(exit_code(stop))
    n, a = len(summary["per_seed"]), summary["after"]
    result = "" if a["mean"] is None else f"; held-out success {100 * a['mean']:.1f} ± {100 * a['std']:.1f} %"
    missing = f"; not finished: seeds {summary['missing']}" if summary["missing"] else ""
    out.print(f"{summary['learned']} of {n} seeds learned{result}{missing}; {spec.out_dir / 'summary.md'}",
              highlight=False, soft_wrap=True)


EVAL_HELP = """Evaluate a run folder (its latest checkpoint) or a checkpoint folder on held-out tasks and print the
greedy success rate (and pass@k with eval.pass_k=K). Overrides: eval.episodes=N, eval.pass_k=K,
eval.seed_offset=S. --general also scores 20 general questions (what training did to the rest of the model)."""


@app.command(
    "eval",
    cls=Command,
    help=EVAL_HELP,
    short_help="Evaluate a run or checkpoint on held-out tasks (greedy success, pass@k).",
    context_settings=HELP_OPTIONS,
)
def eval_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN_OR_CHECKPOINT_DIR"),
    overrides: list[str] = typer.Argument(None, metavar="[eval.KEY=VALUE ...]"),
    general: bool = typer.Option(False, "--general", help="Also score 20 general questions the base model answers "
                                 "correctly, for the run and for its base model (eval.general=true)."),
) -> None:
    from selfevolve.errors import SelfEvolveError

    quiet_libraries()
    try:
        from selfevolve.train.run import evaluate_checkpoint

        result = evaluate_checkpoint(run_dir, [*(overrides or []), *(["eval.general=true"] if general else [])])
    except SelfEvolveError as e:
        fail(str(e))
    except KeyboardInterrupt as stop:  # Ctrl-C: 130; SIGTERM: 143 (train/signals.py)
        raise typer.Exit(exit_code(stop))
    for k, v in result.items():
        out.print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
