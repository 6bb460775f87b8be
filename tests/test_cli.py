"""Tests of the ``selfevolve`` command: user errors exit 2 with one clear line (no traceback), help, eval,
run-folder protection, resume checks and Ctrl-C.

The end-to-end paths run the real entry point in a subprocess (``python -m selfevolve.cli``); the many
error cases run in-process through typer's CliRunner (a subprocess costs ~7 s of imports each). Every model
here is ``model.name=tiny`` with tiny budgets, and one finished run is shared by the module.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import typer
from rich.cells import cell_len
from typer.testing import CliRunner

from conftest import TINY, assert_user_error, cli_env, invoke, joined
from selfevolve.cli import app

CKPT_FILES = ("state.json", "adapter.safetensors", "optimizer.safetensors", "rng.json", "config.yaml")


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """In-process runs: many torch threads on a busy CPU are 10x slower than one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def metrics_steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def latest_step(run: Path) -> int | None:
    try:
        name = (run / "checkpoints" / "latest").read_text().strip()
    except OSError:
        return None
    return int(name.split("-")[1]) if name.startswith("step-") else None


# ---- a finished run, shared ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, selfevolve_cmd):
    run = tmp_path_factory.mktemp("cli") / "run"
    p = selfevolve_cmd("train", *TINY, "train.steps=1", f"train.out_dir={run}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    assert joined(p.stdout).startswith("held-out success ") and f"run folder {run}" in joined(p.stdout)
    return run


def test_finished_run_layout(finished_run):
    run = finished_run
    for name in ("config.yaml", "metrics.jsonl", "trajectories.jsonl", "tensorboard"):
        assert (run / name).exists(), name
    assert latest_step(run) == 1
    for f in (*CKPT_FILES, "adapter"):
        assert (run / "checkpoints" / "step-1" / f).exists(), f
    assert metrics_steps(run) == [0, 1]


# ---- bad configuration: one line, exit 2, no traceback ---------------------------------------------------------
@pytest.fixture(scope="module")
def stepz(selfevolve_cmd, tmp_path_factory):
    return selfevolve_cmd("train", "train.stepz=3", cwd=tmp_path_factory.mktemp("cwd"))


def test_subprocess_unknown_nested_key(stepz):
    assert stepz.returncode == 2, stepz.stderr[-3000:]
    assert "Traceback" not in stepz.stderr + stepz.stdout
    err = joined(stepz.stderr)
    assert err.startswith("error: ")
    assert "'train.stepz'" in err and "steps" in err and "save_every" in err


def test_error_message_is_one_line(stepz):
    lines = [line for line in stepz.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines


@pytest.mark.parametrize(
    "args, needles",
    [
        (["foo=1"], ["'foo'", "seed", "model", "algo", "train"]),
        (["model.name=tiny", "train.stepz=3"], ["'train.stepz'", "steps", "tasks_per_step"]),
        (["train.steps=abc"], ["train.steps", "integer", "'abc'"]),
        (["algo.name=foo"], ["algo.name", "'grpo'", "'rloo'", "'foo'"]),
        (["env.sizee=3"], ["env.sizee", "frozenlake", "size", "slippery"]),
        (["env.name=sokoban", "env.size=3"], ["env.size", "sokoban", "dim_room"]),
        (["env.size=abc"], ["size", "int", "'abc'"]),
        (["missing.yaml"], ["config file not found: missing.yaml"]),
        (["notafile"], ["config file not found: notafile"]),
        (["notafile", "train.steps=1"], ["config file not found: notafile"]),
        (["model.name=tiny", "train.steps"], ["'train.steps'", "key=value"]),
    ],
)
def test_train_bad_config(args, needles, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err, output = invoke("train", *args)
    assert_user_error(code, err, output, *needles)
    assert list(tmp_path.iterdir()) == []  # nothing was written


def test_train_unknown_env(tmp_path):
    code, err, output = invoke("train", "env.name=chess", f"train.out_dir={tmp_path / 'r'}")
    assert_user_error(code, err, output, "unknown env 'chess'", "frozenlake", "sokoban")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args, needles", [
    (["env.name=sokoban", "env.dim_room=[4,4]"], ["sokoban option 'dim_room'", ">= 5"]),
    (["questioning.explorationz=3"], ["'questioning.explorationz'", "explorations", "breadth_steps"]),
    (["env.name=shop", "questioning.writer=magic"], ["questioning.writer", "'llm'", "'template'"]),
])
def test_explore_bad_config(args, needles, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err, output = invoke("explore", "model.name=tiny", *args)
    assert_user_error(code, err, output, *needles)


def test_train_unknown_model(tmp_path):
    code, err, output = invoke("train", "model.name=/no/such/model", f"train.out_dir={tmp_path / 'r'}")
    assert_user_error(code, err, output, "model.name='/no/such/model'", "tiny", "smollm2-135m")


def test_failed_start_leaves_no_run_behind(tmp_path):
    out = tmp_path / "r"
    code, _, _ = invoke("train", "model.name=/no/such/model", f"train.out_dir={out}")
    assert code == 2
    code, err, output = invoke("train", *TINY, "train.steps=0", f"train.out_dir={out}")
    assert code == 0, output


@pytest.mark.parametrize(
    "text, needles",
    [
        ("train: [1,\n  steps: 3\n", ["bad.yaml", "malformed YAML", "line"]),
        ("- a\n- b\n", ["bad.yaml", "top level must be a mapping"]),
        ("train:\n  stepz: 3\n", ["'train.stepz'", "steps"]),
    ],
)
def test_train_bad_yaml(text, needles, tmp_path):
    (tmp_path / "bad.yaml").write_text(text)
    code, err, output = invoke("train", tmp_path / "bad.yaml")
    assert_user_error(code, err, output, *needles)


def test_train_yaml_and_override_errors_name_the_file(tmp_path):
    (tmp_path / "ok.yaml").write_text("model:\n  name: tiny\n")
    code, err, output = invoke("train", tmp_path / "ok.yaml", "algo.name=a2c")
    assert_user_error(code, err, output, "algo.name", "'grpo'", "'rloo'")


def test_error_text_in_brackets_is_printed(tmp_path):
    code, err, output = invoke("train", "env.name=sokoban", "env.dim_room=[5,5,5]",
                               f"train.out_dir={tmp_path / 'r'}")
    assert_user_error(code, err, output, "[height, width]")


def test_error_text_with_markup_like_path_does_not_crash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err, output = invoke("train", "[/]cfg.yaml")
    assert_user_error(code, err, output, "config file not found")


def test_out_dir_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    code, err, output = invoke("train", *TINY, f"train.out_dir={tmp_path / 'afile'}")
    assert_user_error(code, err, output, "afile")


# ---- eval errors -----------------------------------------------------------------------------------------------
def test_eval_missing_dir():
    code, err, output = invoke("eval", "/no/such/dir")
    assert_user_error(code, err, output, "/no/such/dir", "no such run or checkpoint folder")


def test_eval_empty_dir(tmp_path):
    code, err, output = invoke("eval", tmp_path)
    assert_user_error(code, err, output, "holds no checkpoint", str(tmp_path))


def test_eval_incomplete_checkpoint(tmp_path):
    (tmp_path / "state.json").write_text('{"step": 1}')
    code, err, output = invoke("eval", tmp_path)
    assert_user_error(code, err, output, str(tmp_path))


def test_eval_rejects_non_eval_overrides(finished_run):
    code, err, output = invoke("eval", finished_run, "algo.lr=0.5")
    assert_user_error(code, err, output, "only eval.* keys", "'algo.lr'")
    code, err, output = invoke("eval", finished_run, "eval.episodes=abc")
    assert_user_error(code, err, output, "eval.episodes", "integer")


# ---- help ------------------------------------------------------------------------------------------------------
SECTIONS = ["top level", "model", "model.lora", "env", "agent", "algo", "algo.gigpo", "algo.ppo", "algo.self_ac",
            "reward", "reward.selaur", "attribution", "filter", "sampling", "rollout", "search", "experience",
            "questioning", "evolve", "llm_api", "train", "eval", "distributed"]


@pytest.mark.parametrize("width", [80, 160])
def test_train_help_lists_every_key_by_section_within_the_width(width):
    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(cell_len(line) for line in lines) <= width  # wrapped to the terminal, nothing cut or spilling
    titles = [m.group(1) for line in lines if (m := re.match(r"╭─ (\S+(?: level)?) ─", line))]
    assert titles == ["Arguments", "Options", *SECTIONS]
    text = " ".join(result.output.replace("│", " ").split())
    for key, desc in [
        ("train.steps", "Training steps"), ("model.name", "'tiny'"), ("env.name", "Environment"),
        ("algo.name", "Advantage estimator"), ("seed", "Global seed"), ("train.resume", "Continue the run"),
        ("train.overwrite", "replaced"), ("eval.episodes", "Held-out tasks"), ("env.<option>", "size=4"),
        ("train.warm_start_steps", "Behaviour-cloning"),
    ]:
        assert key in text and desc in text, key
    assert "<bool>" not in result.output  # --help is a flag: it takes no value, so it has no type
    row = next(line for line in lines if "train.resume" in line)
    if width >= 120:  # key, type, default and description side by side
        assert row.split()[1:4] == ["train.resume", "bool", "false"]
        algo = next(line for line in lines if "algo.name " in line)
        assert algo.split()[1:7] == ["algo.name", "grpo", "|", "rloo", "|", "gigpo"]
    else:  # the type and default under the key
        below = lines[lines.index(row) + 1].replace("│", " ").split()
        assert below[:3] == ["bool", "=", "false"]


@pytest.mark.parametrize("args, needle", [([], "train"), (["eval"], "RUN_OR_CHECKPOINT_DIR"), (["view"], "--serve")])
def test_help(args, needle):
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert needle in result.output and "<bool>" not in result.output
    if not args:
        assert "eval" in result.output


def test_help_imports_no_heavy_library():
    """`selfevolve --help` answers without torch, transformers or the trainer (benchmarks/bench_cli_help.py
    times it)."""
    code = ("import sys\nfrom selfevolve.cli import main\nsys.argv = ['selfevolve', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "heavy = ('torch', 'transformers', 'peft', 'selfevolve.train.trainer')\n"
            "print(sorted(m for m in heavy if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "Commands" in p.stdout and p.stdout.splitlines()[-1] == "[]"


# ---- ports ----------------------------------------------------------------------------------------------------
def test_view_and_serve_default_to_different_ports():
    command = typer.main.get_command(app)
    ports = {name: next(p.default for p in command.commands[name].params if p.name == "port")
             for name in ("view", "serve")}
    assert ports == {"view": 8765, "serve": 8000}


def test_a_port_in_use_is_one_clear_line(finished_run):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        for cmd in (["view", finished_run, "--serve"], ["serve", finished_run]):
            code, err, output = invoke(*cmd, "--port", port)
            assert_user_error(code, err, output, f"port {port} on 127.0.0.1 is in use",
                              "choose another with --port N, or --port 0 for any free port")


# ---- eval on a finished run ------------------------------------------------------------------------------------
def test_eval_run_dir_subprocess(finished_run, selfevolve_cmd):
    p = selfevolve_cmd("eval", finished_run, "eval.episodes=2")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    lines = p.stdout.splitlines()
    assert "checkpoint_step: 1" in lines and "episodes: 2" in lines
    success = [line for line in lines if line.startswith("eval/success: ")]
    assert len(success) == 1 and 0.0 <= float(success[0].split(": ")[1]) <= 1.0


def test_eval_checkpoint_folder(finished_run):
    code, err, output = invoke("eval", finished_run / "checkpoints" / "step-1", "eval.episodes=2")
    assert code == 0, output
    assert "checkpoint_step: 1" in output and "eval/success: " in output
    code, err, output = invoke("eval", finished_run / "checkpoints" / "step-0", "eval.episodes=1")
    assert code == 0, output
    assert "checkpoint_step: 0" in output and "episodes: 1" in output


# ---- run folder protection and resume checks -------------------------------------------------------------------
def test_train_into_existing_run_is_refused(finished_run):
    before = {p: p.read_bytes() for p in finished_run.rglob("*") if p.is_file()}
    code, err, output = invoke("train", *TINY, "train.steps=1", f"train.out_dir={finished_run}")
    assert_user_error(code, err, output, "already holds a run", "train.resume=true", "train.overwrite=true")
    after = {p: p.read_bytes() for p in finished_run.rglob("*") if p.is_file()}
    assert after == before


def test_resume_with_other_run_defining_settings_is_refused(finished_run):
    before = (finished_run / "config.yaml").read_text()
    code, err, output = invoke("train", *TINY, "train.steps=2", "algo.lr=0.5", "train.resume=true",
                               f"train.out_dir={finished_run}")
    assert_user_error(code, err, output, "cannot resume", "algo", "only train.* and eval.* may change")
    code, err, output = invoke("train", *TINY, "model.lora.r=4", "train.resume=true",
                               f"train.out_dir={finished_run}")
    assert_user_error(code, err, output, "model")
    assert (finished_run / "config.yaml").read_text() == before
    assert metrics_steps(finished_run) == [0, 1]


def test_resume_from_step_zero_logs_step_zero_once(tmp_path):
    out = tmp_path / "r"
    code, _, output = invoke("train", *TINY, "train.steps=0", f"train.out_dir={out}")
    assert code == 0, output
    code, _, output = invoke("train", *TINY, "train.steps=1", "train.resume=true", f"train.out_dir={out}")
    assert code == 0, output
    assert metrics_steps(out) == [0, 1]


# ---- Ctrl-C, SIGTERM and resume -------------------------------------------------------------------------------
def _default_sigint() -> None:
    """In the child, before exec: Ctrl-C's default handling. A test run started in the background by a
    non-interactive shell ignores SIGINT, the child would inherit that, and Python installs no KeyboardInterrupt
    handler for an ignored signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "interrupted at step"),
                                             (signal.SIGTERM, 143, "stopped by SIGTERM at step")])
def test_stop_keeps_a_valid_checkpoint_and_resume_finishes(tmp_path, sig, code, said):
    run = tmp_path / "run"
    args = [*TINY, "train.eval_every=0", "train.save_every=1", f"train.out_dir={run}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "selfevolve.cli", "train", *args, "train.steps=50"],
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 60
        while (latest_step(run) or 0) < 1:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no checkpoint step-1 within 60 s"
            time.sleep(0.1)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, stderr[-3000:]
    assert "Traceback" not in stderr
    assert said in joined(stderr) and "train.resume=true" in joined(stderr)

    step = latest_step(run)
    assert step is not None and 1 <= step < 50
    ckpt = run / "checkpoints" / f"step-{step}"
    for f in CKPT_FILES:
        assert (ckpt / f).is_file(), f
    assert json.loads((ckpt / "state.json").read_text())["step"] == step
    assert not list((run / "checkpoints").glob(".tmp-*"))

    # Resume in-process (saves a Python start); same settings, only train.steps differs.
    code, err, output = invoke("train", *args, f"train.steps={step + 1}", "train.resume=true")
    assert code == 0, output
    assert f"from step {step}" in err
    assert latest_step(run) == step + 1
    assert metrics_steps(run) == list(range(step + 2))
    traj_steps = {json.loads(line)["step"] for line in (run / "trajectories.jsonl").read_text().splitlines()}
    assert traj_steps == set(range(1, step + 2))
