"""What every ``selfevolve`` command shares: the typer app they register on, the two consoles, and the plumbing of a
fixable error (one line, exit status 2), of a configuration from ``[FILE.yaml] [KEY=VALUE ...]`` and of ports.

Nothing heavy is imported at the top (torch, transformers, the trainer, even the config): `selfevolve --help`
answers in well under a second; each command imports what it needs.
"""

from __future__ import annotations

import errno
import os
import warnings
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from selfevolve.cli_help import Group
from selfevolve.train.signals import exit_code

err = Console(stderr=True)
out = Console()

app = typer.Typer(
    cls=Group,
    add_completion=False,
    no_args_is_help=True,
    help="Train LLM agents with multi-turn reinforcement learning (GRPO/RLOO + PPO-clip) on text environments.",
)
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}  # every command's context_settings: -h works as --help


def quiet_libraries() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    # Deprecation notices from inside transformers/peft are not the user's to act on.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")


def split_args(args: list[str]) -> tuple[Optional[str], list[str]]:
    """The first argument may be a YAML file; the rest are key=value overrides."""
    if args and "=" not in args[0]:
        return args[0], args[1:]
    return None, args


def fail(msg: str) -> None:
    from selfevolve.errors import bounded

    # escape: messages hold paths and lists in brackets, which rich would read as markup; bounded: one line a
    # person reads, however large the value it quotes
    err.print(f"[red]error:[/] {escape(bounded(msg))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def check_port(port: int) -> None:
    """A TCP port is 1-65535 (0 asks for any free one); anything else is a one-line error, not the socket
    library's OverflowError."""
    if not 0 <= port <= 65535:
        fail(f"--port {port}: a port is 1-65535 (or 0 for any free port)")


# Distinct default ports, so that a run can be served and viewed at once.
SERVE_PORT = 8000  # selfevolve serve: the port OpenAI-compatible servers (vLLM) use by default
VIEW_PORT = 8765  # selfevolve view --serve


def listen_failed(host: str, port: int, e: OSError) -> None:
    if e.errno == errno.EADDRINUSE:
        fail(f"port {port} on {host} is in use (another server, perhaps `selfevolve serve` or `selfevolve view "
              f"--serve`); choose another with --port N, or --port 0 for any free port")
    fail(f"cannot listen on {host}:{port} ({e.strerror or e})")


def with_config(args: list[str] | None, run):
    """``run(cfg)`` on the config of ``[FILE.yaml] [KEY=VALUE ...]``: a fixable error prints one line and exits 2,
    Ctrl-C exits 130 and SIGTERM 143. Returns ``(cfg, result)``."""
    from selfevolve.config import load_config
    from selfevolve.errors import SelfEvolveError

    quiet_libraries()
    path, overrides = split_args(args or [])
    try:
        cfg = load_config(path, overrides)
        return cfg, run(cfg)
    except SelfEvolveError as e:
        fail(str(e))
    except KeyboardInterrupt as stop:  # Ctrl-C: 130; SIGTERM: 143 (train/signals.py)
        raise typer.Exit(exit_code(stop))
