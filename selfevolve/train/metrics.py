"""Metrics to ``metrics.jsonl`` (one JSON object per step) and to TensorBoard, under stable names.

Names: ``reward/mean``, ``success/rate``, ``valid/rate``, ``turns/mean``, ``eval/success``, ``eval/pass@k``,
``loss/policy``, ``kl``, ``clip_frac``, ``entropy``, ``grad_norm``, ``time/rollout``, ``time/update``,
``tokens_per_s``, ``mem/peak_rss_gb`` (:func:`peak_rss_gb`). ``entropy`` is the policy's mean entropy (at
``agent.temperature``) over the generated tokens, measured during the update (over the rows the update runs:
``update/idle_rows`` is the fraction it leaves out because all their advantages are 0,
``selfevolve/objectives/update.py``).

Per intent: environments that put ``info["intent"]`` in their steps (the tool worlds: ``cancel_order``,
``flight_count``, ...) also get ``success/intent/<intent>`` (training rollouts) and
``eval/success/intent/<intent>`` (evaluation): the success rate of the episodes of that intent in the batch.
An intent with no episode in a batch has no value at that step (it is left out, not logged as 0).

Time per phase: ``time/rollout`` and ``time/update`` of every step, ``time/eval`` of a record with an
evaluation, and at step 0 ``time/warm_start`` and ``time/eval_warm_start``. The warm start's loss per
behaviour-cloning step goes to ``warm_start.jsonl`` (and TensorBoard's ``warm/loss_bc``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from selfevolve.types import Trajectory

WARM_LOG = "warm_start.jsonl"


def held_out_evaluations(record: dict) -> list[tuple[float, int | None]]:
    """``(success, tasks)`` of each held-out evaluation a ``metrics.jsonl`` record holds, in the order they ran:
    the step's own (``eval/``), then, in step 0's record, the one after the warm start (``warm/``,
    ``eval.after_warm_start``). ``tasks`` (distinct held-out tasks) is None in runs older than it."""
    out = []
    for kind in ("eval", "warm"):
        success, tasks = record.get(f"{kind}/success"), record.get(f"{kind}/tasks")
        if isinstance(success, (int, float)):
            out.append((float(success), int(tasks) if isinstance(tasks, (int, float)) else None))
    return out


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """The step's rollouts: reward, success, valid replies, turns; ``rollout/entropy``, the sampling policy's mean
    entropy per generated token (nats; it falls before a collapse); ``groups/zero_spread``, the share of groups
    whose rollouts all got the same reward (zero advantage: no gradient from them)."""
    n = max(len(trajs), 1)
    steps = [s for t in trajs for s in t.steps]
    entropies = [e for s in steps for e in s.entropy]
    groups: dict[str, list[float]] = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t.reward)
    return {
        "reward/mean": sum(t.reward for t in trajs) / n,
        "success/rate": sum(t.success for t in trajs) / n,
        "valid/rate": sum(s.valid for s in steps) / max(len(steps), 1),
        "turns/mean": len(steps) / n,
        **({"rollout/entropy": sum(entropies) / len(entropies)} if entropies else {}),
        "groups/zero_spread": sum(max(g) - min(g) <= 1e-9 for g in groups.values()) / max(len(groups), 1),
        **intent_success(trajs, "success/intent/"),
    }


def intent_success(trajs: list[Trajectory], prefix: str) -> dict[str, float]:
    """``{prefix + intent: success rate}`` over the episodes whose last step's info names an intent, sorted."""
    by_intent: dict[str, list[bool]] = {}
    for t in trajs:
        intent = t.steps[-1].info.get("intent") if t.steps else None
        if intent:
            by_intent.setdefault(str(intent), []).append(bool(t.success))
    return {f"{prefix}{k}": sum(v) / len(v) for k, v in sorted(by_intent.items())}


def peak_rss_gb() -> float | None:
    """This process's peak resident memory so far, in GB (10^9 bytes), from ``getrusage``'s ``ru_maxrss`` (KiB
    on Linux, bytes on macOS); None where there is none (Windows). Rollout workers of the Ray backend are other
    processes and not counted."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak * (1 if sys.platform == "darwin" else 1024) / 1e9, 3)


def truncate_jsonl(path: Path, max_step: int) -> None:
    """Drop records with ``step > max_step``: on resume they are redone, so they must not appear twice."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a line cut by a crash (or not JSON at all: a run folder may come from anyone)
        step = record.get("step", 0) if isinstance(record, dict) else None
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step <= max_step:
            keep.append(line)
    path.write_text("".join(line + "\n" for line in keep), encoding="utf-8")


class MetricsLogger:
    def __init__(self, out_dir: Path, tensorboard: bool = True, purge_step: int | None = None):
        self.path = out_dir / "metrics.jsonl"
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                # purge_step: on resume, TensorBoard drops the events logged after the checkpoint
                self.writer = SummaryWriter(str(out_dir / "tensorboard"), purge_step=purge_step)
            except ImportError:  # tensorboard is a dependency, but a missing one must not stop training
                self.writer = None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.writer is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    self.writer.add_scalar(k, v, step)
            self.writer.flush()

    def scalar(self, name: str, value: float, step: int) -> None:
        """A TensorBoard-only point (e.g. a warm-start curve with its own step count)."""
        if self.writer is not None:
            self.writer.add_scalar(name, value, step)

    def warm_step(self, k: int, loss: float, seconds: float) -> None:
        """One behaviour-cloning step of the warm start: a line of ``warm_start.jsonl`` (all at step 0, before
        any RL step) and TensorBoard's ``warm/loss_bc`` at ``k``."""
        with (self.path.parent / WARM_LOG).open("a") as f:
            f.write(json.dumps({"step": 0, "warm_step": k, "loss_bc": loss, "seconds": round(seconds, 3)}) + "\n")
        self.scalar("warm/loss_bc", loss, k)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
