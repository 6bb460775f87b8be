"""What a run reports while it trains and when it ends, where no terminal shows a live bar (a log file, CI): one
plain line per phase and per step, the closing sentence, and the logs the viewer reads beside metrics.jsonl
(every evaluation's episodes, the warm start's loss per step), truncated on resume like the other step logs.

The runs are real tiny runs of the ``selfevolve`` command in a subprocess whose output goes to pipes."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from conftest import TINY, cli_env, joined
from selfevolve.train.progress import clock, final_sentence, make_progress, solved

RUN = [*TINY, "train.progress=true", "train.steps=3", "train.eval_every=2", "train.warm_start_steps=2",
       "train.warm_start_tasks=2", "eval.after_warm_start=true"]


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def train(*args: str, out: Path) -> subprocess.CompletedProcess:
    env = cli_env()
    env.pop("COLUMNS")  # the width a pipe gets by default (80): no line may be cut to it
    return subprocess.run([sys.executable, "-m", "selfevolve.cli", "train", *args, f"train.out_dir={out}"],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def piped(tmp_path_factory):
    out = tmp_path_factory.mktemp("progress") / "run with a long name to pass eighty columns in the last line"
    p = train(*RUN, out=out)
    assert p.returncode == 0, p.stderr[-3000:]
    return out, p


def test_a_piped_run_prints_one_plain_line_per_phase_and_step(piped):
    out, p = piped
    err = p.stderr.splitlines()
    assert not [x for x in err if "━" in x or "\x1b" in x or "\r" in x]  # no bar, no terminal codes
    others = [x for x in err if not x.startswith(("evaluation (", "step ", "steps ", "warm start"))]
    assert others == [], others  # nothing else (no warnings on a clean run)
    metrics = lines(out / "metrics.jsonl")
    n = 2  # eval.episodes in TINY
    e0 = f"{round(metrics[0]['eval/success'] * n)}/{n}"
    assert err[:2] == [f"evaluation (start): {n} held-out tasks", err[1]]
    assert re.fullmatch(rf"evaluation \(start\): success {e0}, reward -?\d+\.\d{{3}}, valid \d\.\d{{3}} · "
                        r"0:\d\d elapsed", err[1]), err[1]
    assert err[2] == "warm start: 2 steps of imitating the expert, 2 episodes each"
    warm = lines(out / "warm_start.jsonl")
    assert [w["warm_step"] for w in warm] == [1, 2] and all(w["step"] == 0 and w["seconds"] > 0 for w in warm)
    for k, w in enumerate(warm, 1):  # the loss of each behaviour-cloning step, as logged
        assert re.fullmatch(rf"warm start {k}/2: loss {w['loss_bc']:.4f} · 0:\d\d elapsed, ~0:\d\d left in the "
                            "warm start", err[2 + k]), err[2 + k]
    assert err[5].startswith("evaluation (after warm start): 2 held-out tasks")
    assert err[6].startswith(f"evaluation (after warm start): success {round(metrics[0]['warm/success'] * n)}/{n}")
    assert err[7] == "steps 1-3 of 3: 1 task x 2 rollouts each"  # the RL steps begin: what each plays
    steps = [x for x in err if x.startswith("step ")]
    assert len(steps) == 3
    for m, line in zip(metrics[1:], steps):
        figures = (f"step {m['step']}/3: reward {m['reward/mean']:.3f}, success {m['success/rate']:.2f}, "
                   f"valid {m['valid/rate']:.2f}, ")
        if "eval/success" in m:  # steps 2 (eval_every) and 3 (the end)
            figures += f"eval {round(m['eval/success'] * n)}/{n}, "
        assert line.startswith(figures), (line, figures)
        assert re.search(r"tok/s · 0:\d\d elapsed, ~0:\d\d left$", line), line
    assert [x for x in err if x.startswith("evaluation (") and "success" in x][2:] == [
        x for x in err if x.startswith(("evaluation (step 2): success", "evaluation (end): success"))]


def test_the_run_ends_with_one_sentence(piped):
    out, p = piped
    metrics = lines(out / "metrics.jsonl")
    first, last = metrics[0]["eval/success"], metrics[-1]["eval/success"]
    assert [m["step"] for m in metrics] == [0, 1, 2, 3] and all(m["mem/peak_rss_gb"] > 0.1 for m in metrics)
    stdout = p.stdout.splitlines()
    assert len(stdout) == 1 and len(stdout[0]) > 80  # one line, not cut at the pipe's 80 columns
    m = re.fullmatch(r"held-out success (\d+)/2 → (\d+)/2 \(seed 0\) in (\d+) s, peak memory (\d+\.\d) GB; "
                     r"run folder (.+)", stdout[0])
    assert m, stdout[0]
    assert (int(m[1]), int(m[2])) == (round(first * 2), round(last * 2))
    assert float(m[4]) >= round(max(x["mem/peak_rss_gb"] for x in metrics), 1) and m[5] == str(out)
    assert "{" not in p.stdout  # no Python dict


def test_every_evaluation_logs_its_episodes_for_the_viewer(piped):
    out, _ = piped
    recs = lines(out / "eval_trajectories.jsonl")
    labels = [(r["eval"]["step"], r["eval"]["label"]) for r in recs]
    assert labels == [(0, "start")] * 2 + [(0, "after warm start")] * 2 + [(2, "step 2")] * 2 + [(3, "end")] * 2
    assert all(r["step"] == r["eval"]["step"] and r["eval"]["seen"] is False for r in recs)  # held out: never seen
    metrics = {m["step"]: m for m in lines(out / "metrics.jsonl")}
    for (step, label), key in [((0, "start"), "eval/success"), ((0, "after warm start"), "warm/success"),
                               ((2, "step 2"), "eval/success"), ((3, "end"), "eval/success")]:
        eps = [r for r in recs if (r["eval"]["step"], r["eval"]["label"]) == (step, label)]
        assert [r["task"]["id"] for r in eps] == ["frozenlake-eval-1000000", "frozenlake-eval-1000001"]
        assert sum(r["success"] for r in eps) / 2 == metrics[step][key]  # the episodes the metric scored
        for r in eps:  # recorded like training episodes: prompts, tokens, the first observation
            assert r["system"].startswith("FrozenLake") and r["flags"]["query"].startswith(("P", "_"))
            assert all("tokens" in s and "prompt" in s for s in r["steps"])


def test_resume_drops_the_evaluations_of_undone_steps(tmp_path):
    out = tmp_path / "run"
    p = train(*TINY, "train.steps=1", out=out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr == ""  # train.progress=false: no lines
    forged = {**lines(out / "eval_trajectories.jsonl")[-1], "step": 2}  # as if a crash followed step 2's eval
    with (out / "eval_trajectories.jsonl").open("a") as f:
        f.write(json.dumps(forged) + "\n")
    p = train(*TINY, "train.steps=2", "train.resume=true", out=out)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = lines(out / "eval_trajectories.jsonl")
    assert [(r["step"], r["eval"]["label"]) for r in recs] == [(0, "start")] * 2 + [(1, "end")] * 2 + [(2, "end")] * 2
    assert "resuming" in joined(p.stderr)
    metrics = lines(out / "metrics.jsonl")
    assert re.fullmatch(rf"held-out success {round(metrics[0]['eval/success'] * 2)}/2 → "
                        rf"{round(metrics[-1]['eval/success'] * 2)}/2 \(seed 0\) in \d+ s, peak memory \d+\.\d GB; "
                        rf"run folder {re.escape(str(out))}", p.stdout.strip())


def test_clock_counts_and_the_sentence_without_evaluations(tmp_path):
    assert [clock(x) for x in (0, 59.4, 61, 3599, 3600, 7325)] == ["0:00", "0:59", "1:01", "59:59", "1:00:00",
                                                                    "2:02:05"]
    assert solved(28 / 64, 64) == "28/64" and solved(0.0, 64) == "0/64" and solved(1.0, 8) == "8/8"
    assert final_sentence(tmp_path, 3, 64, 804.6, 8.26) == (
        f"trained, no held-out evaluation (seed 3) in 13.4 min, peak memory 8.3 GB; run folder {tmp_path}")
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "eval/success": 0.0}\n{"step": 1}\ncut{\n'
                                            '{"step": 20, "eval/success": 0.4375}\n')
    assert final_sentence(tmp_path, 0, 64, 45, None) == f"held-out success 0/64 → 28/64 (seed 0) in 45 s; run " \
                                                        f"folder {tmp_path}"
    # train.steps=0 eval.after_warm_start=true: the evaluation after the warm start is the run's last
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "eval/success": 0.0588, "eval/tasks": 17, '
                                            '"warm/success": 0.2353, "warm/tasks": 17}\n')
    assert final_sentence(tmp_path, 0, 64, 45, None).startswith("held-out success 1/17 → 4/17 (seed 0)")


def test_a_terminal_gets_the_live_bar_anything_else_plain_lines(tmp_path):
    def shown(console_args: dict, enabled: bool = True) -> tuple[str, str]:
        f = io.StringIO()
        p = make_progress(Console(file=f, width=100, **console_args), enabled, total=3, done=0, episodes=64)
        with p:
            p.evaluating("start")
            p.evaluated("start", {"eval/success": 0.0, "eval/reward": -0.5, "eval/valid": 0.25})
            p.steps_begin(4, 8)
            p.step(1, {"reward/mean": 0.25, "success/rate": 0.125, "valid/rate": 0.5, "tokens_per_s": 99.6}, None)
        return type(p).__name__, f.getvalue()

    kind, out = shown({"force_terminal": True})
    assert kind == "LiveBar" and "train" in out and "1/3" in out and "eval 0/64" in out and "\x1b[" in out
    kind, out = shown({})  # a file: not a terminal
    assert kind == "PlainLines" and "\x1b[" not in out
    assert out.splitlines()[:2] == ["evaluation (start): 64 held-out tasks",
                                    "evaluation (start): success 0/64, reward -0.500, valid 0.250 · 0:00 elapsed"]
    assert out.splitlines()[2] == "steps 1-3 of 3: 4 tasks x 8 rollouts each"
    assert re.fullmatch(r"step 1/3: reward 0\.250, success 0\.12, valid 0\.50, 100 tok/s · 0:00 elapsed, ~0:00 left",
                        out.splitlines()[3])
    assert shown({"force_terminal": True}, enabled=False) == ("Progress", "")  # train.progress=false
