"""How a training run shows its progress, and the sentence it ends with.

On a terminal: rich's live bar (steps done, elapsed, time left, the last step's figures). Anywhere else (output
redirected to a file, a pipe, CI) a live bar prints nothing until it ends, and then a line cut to 80 columns, so
there the run writes one plain line per phase and per step instead, flushed at once::

    evaluation (start): 8 held-out tasks
    evaluation (start): success 0/8, reward -0.800, valid 0.000 · 2:33 elapsed
    warm start: 3 steps of imitating the expert, 8 episodes each
    warm start 1/3: loss 1.0678 · 3:49 elapsed, ~2:33 left in the warm start
    ...
    steps 1-3 of 3: 2 tasks x 4 rollouts each
    step 1/3: reward -0.067, success 0.12, valid 0.74, 0.45 tok/s · 14:10 elapsed, ~14:48 left

Time left is the mean time of the steps run so far (evaluations included) times the steps still to run.
``train.progress=false`` shows neither. The run's last line (printed by ``selfevolve train``) is
:func:`final_sentence`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich import progress as bar

from selfevolve.train.metrics import held_out_evaluations


def clock(seconds: float) -> str:
    """``M:SS``, or ``H:MM:SS`` from an hour on."""
    s = max(0, round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def solved(success: float, episodes: int) -> str:
    """A success rate over ``episodes`` held-out tasks as a count: ``28/64``."""
    return f"{round(success * episodes)}/{episodes}"


def step_figures(m: dict[str, float], evaluated: dict[str, float] | None, episodes: int) -> str:
    """A step's key figures: reward, success, valid replies, generation speed, and the evaluation if it had one."""
    parts = [f"reward {m.get('reward/mean', 0):.3f}", f"success {m.get('success/rate', 0):.2f}",
             f"valid {m.get('valid/rate', 0):.2f}"]
    if evaluated and "eval/success" in evaluated:
        parts.append(f"eval {solved(evaluated['eval/success'], int(evaluated.get('eval/tasks', episodes)))}")
    speed = m.get("tokens_per_s", 0)
    parts.append(f"{speed:.0f} tok/s" if speed >= 10 else f"{speed:.2g} tok/s")  # a busy CPU: 0.45, not 0
    return ", ".join(parts)


class Progress:
    """What the trainer reports, shown nowhere (``train.progress=false``); the base of the two that show it, with
    the times that the estimates of time left come from."""

    def __init__(self, console: Console, total: int, done: int, episodes: int):
        self.console, self.total, self.episodes = console, total, episodes
        self.start = time.monotonic()
        self.first_step, self.steps_from = done, None  # the steps this process ran time the ones left
        self.warm_from = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self, step: int) -> float | None:
        """Seconds until the last step: the mean time of the steps this process ran times those still to run."""
        if self.steps_from is None or step <= self.first_step:
            return None
        return (time.monotonic() - self.steps_from) / (step - self.first_step) * (self.total - step)

    # what the trainer reports (the subclasses show it)
    def evaluating(self, label: str) -> None:
        pass

    def evaluated(self, label: str, metrics: dict[str, float]) -> None:
        pass

    def warm_begins(self, n: int, episodes: int) -> None:
        self.warm_from = time.monotonic()

    def warm(self, k: int, n: int, loss: float) -> None:
        pass

    def warm_left(self, k: int, n: int) -> float:
        return (time.monotonic() - self.warm_from) / k * (n - k)

    def steps_begin(self, tasks: int, group: int) -> None:
        """The RL steps begin (after the start evaluation and the warm start); each plays ``group`` rollouts of
        ``tasks`` tasks."""
        self.steps_from = time.monotonic()

    def step(self, step: int, metrics: dict[str, float], evaluated: dict[str, float] | None) -> None:
        pass


class PlainLines(Progress):
    """One plain line per phase and per step, written to the console's file and flushed (see the module
    docstring); never wrapped or cut, whatever the width."""

    def line(self, text: str) -> None:
        f = self.console.file
        f.write(text + "\n")
        f.flush()

    def evaluating(self, label: str) -> None:
        self.line(f"evaluation ({label}): {self.episodes} held-out tasks")

    def evaluated(self, label: str, metrics: dict[str, float]) -> None:
        figures = [f"success {solved(metrics.get('eval/success', 0), int(metrics.get('eval/tasks', self.episodes)))}"]
        figures += [f"{k.removeprefix('eval/')} {v:.3f}" for k, v in metrics.items()
                    if k in ("eval/reward", "eval/valid") or k.startswith("eval/pass@")]
        self.line(f"evaluation ({label}): {', '.join(figures)} · {clock(self.elapsed())} elapsed")

    def warm_begins(self, n: int, episodes: int) -> None:
        super().warm_begins(n, episodes)
        self.line(f"warm start: {n} steps of imitating the expert, {episodes} episodes each")

    def warm(self, k: int, n: int, loss: float) -> None:
        self.line(f"warm start {k}/{n}: loss {loss:.4f} · {clock(self.elapsed())} elapsed, "
                  f"~{clock(self.warm_left(k, n))} left in the warm start")

    def steps_begin(self, tasks: int, group: int) -> None:
        super().steps_begin(tasks, group)
        if self.first_step < self.total:
            self.line(f"steps {self.first_step + 1}-{self.total} of {self.total}: {tasks} task{'s' * (tasks != 1)} "
                      f"x {group} rollouts each")

    def step(self, step: int, metrics: dict[str, float], evaluated: dict[str, float] | None) -> None:
        left = self.left(step)
        eta = f", ~{clock(left)} left" if left is not None else ""
        self.line(f"step {step}/{self.total}: {step_figures(metrics, evaluated, self.episodes)} · "
                  f"{clock(self.elapsed())} elapsed{eta}")


class LiveBar(Progress):
    """rich's live progress bar, for a terminal (the phase or the last step's figures beside it)."""

    def __init__(self, console: Console, total: int, done: int, episodes: int):
        super().__init__(console, total, done, episodes)
        self.bar = bar.Progress(bar.TextColumn("[bold]train"), bar.BarColumn(), bar.MofNCompleteColumn(),
                                bar.TimeElapsedColumn(), bar.TimeRemainingColumn(),
                                bar.TextColumn("{task.description}"), console=console, transient=False)
        self.task = self.bar.add_task("", total=total, completed=done)

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def evaluating(self, label: str) -> None:
        self.bar.update(self.task, description=f"evaluating ({label})")

    def evaluated(self, label: str, metrics: dict[str, float]) -> None:
        self.last_eval = metrics  # shown beside every step after it

    def warm_begins(self, n: int, episodes: int) -> None:
        super().warm_begins(n, episodes)
        self.bar.update(self.task, description=f"warm start 0/{n} (imitating the expert)")

    def warm(self, k: int, n: int, loss: float) -> None:
        self.bar.update(self.task, description=f"warm start {k}/{n} (imitating the expert), loss {loss:.3f}")

    def step(self, step: int, metrics: dict[str, float], evaluated: dict[str, float] | None) -> None:
        shown = step_figures(metrics, evaluated or getattr(self, "last_eval", None), self.episodes)
        self.bar.update(self.task, completed=step, description=shown)


def make_progress(console: Console, enabled: bool, total: int, done: int, episodes: int) -> Progress:
    """The live bar on a terminal, plain lines elsewhere, nothing when ``enabled`` is false (``train.progress``).
    ``done``: steps already done (a resumed run); ``episodes``: held-out tasks per evaluation."""
    if not enabled:
        return Progress(console, total, done, episodes)
    kind = LiveBar if console.is_terminal else PlainLines
    return kind(console, total, done, episodes)


# ---- the last line -----------------------------------------------------------------------------------------

def eval_successes(out_dir: Path) -> list[tuple[float, int | None]]:
    """``(eval/success, eval/tasks)`` of every record of the run's ``metrics.jsonl`` that has one, in order
    (``eval/tasks``: how many distinct held-out tasks there were; None in runs older than it). The evaluation
    after the warm start (``eval.after_warm_start``: ``warm/success``, ``warm/tasks`` in step 0's record) comes
    after that record's own, so that ``train.steps=0`` ends on it."""
    path = out_dir / "metrics.jsonl"
    found = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                found.extend(held_out_evaluations(rec))
    return found


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def final_sentence(out_dir: Path, seed: int, episodes: int, seconds: float, peak_gb: float | None) -> str:
    """The run in one sentence: held-out success before → after (from ``metrics.jsonl``: its first and last
    evaluation, a resumed run's first included), the seed, the time this command took, its peak memory."""
    found = [solved(success, tasks or episodes) for success, tasks in eval_successes(Path(out_dir))]
    if len(found) >= 2:
        what = f"held-out success {found[0]} → {found[-1]}"
    elif found:
        what = f"held-out success {found[0]}"
    else:
        what = "trained, no held-out evaluation"
    memory = f", peak memory {peak_gb:.1f} GB" if peak_gb is not None else ""
    return f"{what} (seed {seed}) in {duration(seconds)}{memory}; run folder {out_dir}"
