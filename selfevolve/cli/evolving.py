"""``selfevolve explore`` and ``evolve``: the agent writes its own training tasks (self-questioning), and improves
from them in rounds."""

from __future__ import annotations

from pathlib import Path

import typer

from selfevolve.cli.base import HELP_OPTIONS, app, err, out, with_config
from selfevolve.cli_help import Command


EXPLORE_HELP = """Self-questioning: explore a tool world (or FrozenLake, Sokoban) with the policy, write training tasks from what it found,
keep those whose reference solution executes, and report what each filter removed. Options as for train
(questioning.* keys; see `selfevolve train --help`), e.g.:

    selfevolve explore env.name=shop questioning.explorations=16 questioning.out=runs/questions

Then train on the tasks: selfevolve train env.name=shop env.tasks_file=runs/questions/tasks.jsonl env.split=synth"""


@app.command(
    cls=Command,
    help=EXPLORE_HELP,
    short_help="Explore a world and write training tasks from it (self-questioning).",
    context_settings=HELP_OPTIONS,
)
def explore(args: list[str] = typer.Argument(None, metavar="[FILE.yaml] [KEY=VALUE ...]")) -> None:
    def run(cfg):
        from selfevolve.questioning.pipeline import run_questioning

        return run_questioning(cfg, console=err)

    _, report = with_config(args, run)
    out.print(f"kept {report['kept']} tasks in {report['tasks_file']} · removed {report['removed']}")


EVOLVE_HELP = """Self-evolution from zero human-written training tasks: rounds of exploring with the policy, turning what
it reached into tasks verified by replay (hindsight), behaviour cloning on their reference paths, RL on them drawn
by learnability with replayed successes beside the RL loss, and held-out evaluation on the environment's test
split. Options as for train (evolve.* keys; train.steps RL updates in all, split over evolve.rounds;
evolve.rl=false: cloning only), e.g.:

    selfevolve evolve env.name=frozenlake evolve.rounds=3 train.out_dir=runs/evolve

Writes RUN/evolve.md (what the run saw, each round's tasks, pool, imitation, RL and held-out success),
evolve.png and round-R/ folders (explorations, pool, the round's training run); train.resume=true continues."""


@app.command(
    help=EVOLVE_HELP,
    short_help="Improve from tasks the agent writes for itself (explore, hindsight tasks, imitation, RL).",
    context_settings=HELP_OPTIONS,
)
def evolve(args: list[str] = typer.Argument(None, metavar="[FILE.yaml] [KEY=VALUE ...]")) -> None:
    def run(cfg):
        from selfevolve.evolve import Evolver

        return Evolver(cfg, console=err).run()

    cfg, summary = with_config(args, run)
    curve = " → ".join(f"{p['success']:.3f}" for p in summary["curve"] if p["success"] is not None)
    k = summary.get("kept_round")
    kept = "" if k is None else f" · kept round {k} ({summary['kept']:.3f})"
    out.print(f"done: {summary['rounds']} rounds in {cfg.train.out_dir} · held-out success {curve}{kept} · pool "
              f"{summary['pool']} tasks · {Path(cfg.train.out_dir) / 'evolve.md'}", highlight=False, soft_wrap=True)
