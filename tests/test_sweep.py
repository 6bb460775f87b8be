"""``selfevolve sweep``: one run per seed, resumable, and a summary whose figures are derived by hand."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from selfevolve.errors import ConfigError
from selfevolve.sweep import (DONE, SweepSpec, _command, make_spec, parse_seeds, read_run, run_sweep,
                              split_sweep_args, summarize, summary_markdown)

TINY = ["model.name=tiny", "env.size=3", "train.steps=2", "train.tasks_per_step=2", "algo.group_size=2",
        "train.warm_start_steps=1", "train.warm_start_tasks=4", "eval.episodes=4"]


def fake_run(folder, evals, curve, wall=100.0, overrides=()):
    """A run folder as training leaves it: metrics.jsonl (evals at the given steps) and the sweep's record."""
    folder.mkdir(parents=True)
    rows = {s: {"step": s} for s in sorted({*evals, *curve})}
    for s, v in evals.items():
        rows[s].update({"eval/success": v, "eval/tasks": 64})
    for s, v in curve.items():
        rows[s]["success/rate"] = v
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows.values()) + "not json\n")
    (folder / DONE).write_text(json.dumps({"wall_s": wall, "overrides": list(overrides), "file": None}))


def test_seeds_parse():
    assert parse_seeds("0-9") == list(range(10)) and parse_seeds("0,3,7") == [0, 3, 7] and parse_seeds(5) == [5]
    assert parse_seeds("2-4,3,9") == [2, 3, 4, 9]
    for bad in ("a", "5-2", "", "-1", "0-2000"):
        with pytest.raises(ConfigError, match="sweep.seeds"):
            parse_seeds(bad)


def test_the_summary_of_hand_made_runs(tmp_path):
    """Three seeds: 0 → 0.25 (step 20), 0.125 → 0.5 with its best 0.5 at step 10 as well as 20, 0 → 0.0625.
    Gains 0.25, 0.375, 0.0625: mean 0.229167, sample std 0.157288, median 0.25, min 0.0625; learned (≥ 0.2): 2."""
    fake_run(tmp_path / "seed-0", {0: 0.0, 20: 0.25}, {1: 0.1, 20: 0.4}, wall=300)
    fake_run(tmp_path / "seed-1", {0: 0.125, 10: 0.5, 20: 0.5}, {1: 0.2}, wall=100)
    fake_run(tmp_path / "seed-2", {0: 0.0, 20: 0.0625}, {}, wall=200)
    results = [read_run(tmp_path / f"seed-{s}", s, w) for s, w in ((0, 300), (1, 100), (2, 200))]
    assert (results[1].before, results[1].after, results[1].best, results[1].best_step) == (0.125, 0.5, 0.5, 10)
    assert results[0].curve == [(1, 0.1), (20, 0.4)] and results[0].eval_tasks == 64 and results[0].steps == 20
    s = summarize(results, 0.2)
    assert s["learned"] == 2
    assert s["gain"]["mean"] == pytest.approx(0.229167, abs=1e-6)
    assert s["gain"]["std"] == pytest.approx(0.157288, abs=1e-6)
    assert (s["gain"]["median"], s["gain"]["min"]) == (0.25, 0.0625)
    assert s["after"]["mean"] == pytest.approx(0.8125 / 3) and s["wall_s"]["median"] == 200
    md = summary_markdown(s, "t")
    assert "**2 of 3 seeds learned**" in md and "| 1 | 12.5 % | 50.0 % | +37.5 | 50.0 % (10) | 64 | 20 | 100 s |" in md


def test_sweep_arguments():
    file, rest, own = split_sweep_args(["seeds=0-2", "sweep.parallel=2", "train.steps=3"])
    assert (file, rest, own) == (None, ["train.steps=3"], {"sweep.seeds": "0-2", "sweep.parallel": "2"})
    with pytest.raises(ConfigError, match="unknown sweep key 'sweep.nope'.*sweep.parallel"):
        split_sweep_args(["sweep.nope=1"])
    with pytest.raises(ConfigError, match="seed is set by the sweep"):
        split_sweep_args(["seed=3"])
    with pytest.raises(ConfigError, match="sweep.parallel must be from 1 to 64"):
        make_spec(["sweep.parallel=0", *TINY])
    with pytest.raises(ConfigError, match="algo.nope"):  # train keys are checked before any run starts
        make_spec(["algo.nope=1", *TINY])


def test_a_sweep_runs_each_seed_resumes_an_interrupted_one_and_skips_finished_ones(tmp_path):
    out = tmp_path / "sweep"
    spec = make_spec([*TINY, "seeds=0-1", f"sweep.out_dir={out}"])
    # seed 1 was interrupted (SIGTERM, as Ctrl-C of a sweep sends) after its first checkpoint
    (out / "seed-1").mkdir(parents=True)
    proc = subprocess.Popen(_command(spec, 1), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not (out / "seed-1" / "checkpoints" / "step-0").is_dir() and time.monotonic() < deadline:
        time.sleep(0.02)  # the tiny run finishes its 2 steps soon after: signal it at once
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 143 and not (out / "seed-1" / DONE).exists()
    summary = run_sweep(spec)
    log = (out / "seed-1" / "train.log").read_text()
    assert "resuming" in log and (out / "seed-0" / DONE).is_file() and (out / "seed-1" / DONE).is_file()
    assert [r["seed"] for r in summary["per_seed"]] == [0, 1] and summary["missing"] == []
    assert all(r["steps"] == 2 and r["after"] is not None for r in summary["per_seed"])
    assert {p.name for p in out.iterdir()} >= {"summary.md", "summary.json", "curves.png", "seed-0", "seed-1"}
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # a second sweep trains nothing: both seeds are finished
    mtime = (out / "seed-0" / "metrics.jsonl").stat().st_mtime
    again = run_sweep(spec)
    assert again["per_seed"] == summary["per_seed"] and (out / "seed-0" / "metrics.jsonl").stat().st_mtime == mtime
    # the same folder with other settings is refused, not silently skipped
    with pytest.raises(ConfigError, match="other settings"):
        run_sweep(SweepSpec([0], 1, out, 0.2, None, [*TINY, "algo.lr=1e-3"]))


def test_view_of_a_sweep_links_each_seed(tmp_path):
    """`selfevolve view OUT` on a sweep: the summary, the figure as a data: image, a page per seed that logged a
    step and a link to it; a seed that never logged one gets no link. The page runs no script."""
    from conftest import invoke

    fake_run(tmp_path / "seed-0", {0: 0.0, 20: 0.25}, {1: 0.1, 20: 0.4})
    fake_run(tmp_path / "seed-1", {0: 0.0, 20: 0.5}, {1: 0.2})
    run_sweep(SweepSpec([0, 1], 1, tmp_path, 0.2, None, []))  # both finished: nothing trains
    (tmp_path / "seed-2").mkdir()  # a seed that died at its start
    code, err, output = invoke("view", str(tmp_path))
    assert code == 0, output
    page = (tmp_path / "view.html").read_text()
    assert "with links to 2 seed pages" in "".join(output.splitlines())
    assert 'href="seed-0/view.html"' in page and 'href="seed-1/view.html"' in page and 'href="seed-2/' not in page
    assert "2 of 2 seeds learned" in page and "data:image/png;base64," in page
    assert "<script" not in page and "default-src 'none'" in page
    assert (tmp_path / "seed-0" / "view.html").is_file()


def test_a_warm_start_only_run_ends_on_its_evaluation_after_the_warm_start(tmp_path):
    """train.steps=0 eval.after_warm_start=true: step 0's record holds the start (1/17) and, after it, the
    evaluation after the warm start (4/17), which is the run's "after"."""
    folder = tmp_path / "seed-0"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval/success": 1 / 17, "eval/tasks": 17,
                                                      "warm/success": 4 / 17, "warm/tasks": 17}) + "\n")
    r = read_run(folder, 0, 60)
    assert (r.before, r.after, r.eval_tasks) == (1 / 17, 4 / 17, 17)
