"""Shared test helpers (kept small): run the ``selfevolve`` command in a fresh Python process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


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
