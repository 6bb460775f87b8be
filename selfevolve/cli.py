"""The ``selfevolve`` command: ``train``, ``sweep``, ``eval``, ``explore``, ``evolve``, ``view``, ``serve`` and
``export``.

Errors the user can fix (a wrong config key, an unknown name, a missing folder) print one line and exit with
status 2 — no traceback.
"""

from __future__ import annotations

import errno
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from selfevolve.cli_help import Command, ConfigCommand, Group
from selfevolve.train.signals import exit_code, stop_on_sigterm

err = Console(stderr=True)
out = Console()

# Nothing heavy is imported at the top (torch, transformers, the trainer, even the config): `selfevolve --help`
# answers in well under a second; each command imports what it needs.
app = typer.Typer(
    cls=Group,
    add_completion=False,
    no_args_is_help=True,
    help="Train LLM agents with multi-turn reinforcement learning (GRPO/RLOO + PPO-clip) on text environments.",
)

TRAIN_HELP = """Train a policy. Options come from defaults, then FILE.yaml (optional), then KEY=VALUE overrides
(dotted keys, YAML values), e.g.:

    selfevolve train model.name=tiny train.steps=5 env.size=3

All configuration keys are listed below, by section."""


def _quiet_libraries() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    # Deprecation notices from inside transformers/peft are not the user's to act on.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")


def _split_args(args: list[str]) -> tuple[Optional[str], list[str]]:
    """The first argument may be a YAML file; the rest are key=value overrides."""
    if args and "=" not in args[0]:
        return args[0], args[1:]
    return None, args


def _fail(msg: str) -> None:
    from selfevolve.errors import bounded

    # escape: messages hold paths and lists in brackets, which rich would read as markup; bounded: one line a
    # person reads, however large the value it quotes
    err.print(f"[red]error:[/] {escape(bounded(msg))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _check_port(port: int) -> None:
    """A TCP port is 1-65535 (0 asks for any free one); anything else is a one-line error, not the socket
    library's OverflowError."""
    if not 0 <= port <= 65535:
        _fail(f"--port {port}: a port is 1-65535 (or 0 for any free port)")


# Distinct default ports, so that a run can be served and viewed at once.
SERVE_PORT = 8000  # selfevolve serve: the port OpenAI-compatible servers (vLLM) use by default
VIEW_PORT = 8765  # selfevolve view --serve


def _listen_failed(host: str, port: int, e: OSError) -> None:
    if e.errno == errno.EADDRINUSE:
        _fail(f"port {port} on {host} is in use (another server, perhaps `selfevolve serve` or `selfevolve view "
              f"--serve`); choose another with --port N, or --port 0 for any free port")
    _fail(f"cannot listen on {host}:{port} ({e.strerror or e})")


def _with_config(args: list[str] | None, run):
    """``run(cfg)`` on the config of ``[FILE.yaml] [KEY=VALUE ...]``: a fixable error prints one line and exits 2,
    Ctrl-C exits 130 and SIGTERM 143. Returns ``(cfg, result)``."""
    from selfevolve.config import load_config
    from selfevolve.errors import SelfEvolveError

    _quiet_libraries()
    path, overrides = _split_args(args or [])
    try:
        cfg = load_config(path, overrides)
        return cfg, run(cfg)
    except SelfEvolveError as e:
        _fail(str(e))
    except KeyboardInterrupt as stop:  # Ctrl-C: 130; SIGTERM: 143 (train/signals.py)
        raise typer.Exit(exit_code(stop))


@app.command(
    cls=ConfigCommand,
    help=TRAIN_HELP,
    short_help="Train a policy (defaults, then FILE.yaml, then KEY=VALUE overrides).",
    context_settings={"help_option_names": ["-h", "--help"]},
)
def train(args: list[str] = typer.Argument(None, metavar="[FILE.yaml] [KEY=VALUE ...]")) -> None:
    def run(cfg):
        from selfevolve.train.trainer import Trainer

        return Trainer(cfg, console=err).train()

    start = time.monotonic()
    cfg, _ = _with_config(args, run)
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
    context_settings={"help_option_names": ["-h", "--help"]},
)
def sweep(args: list[str] = typer.Argument(None, metavar="[FILE.yaml] [KEY=VALUE ...]")) -> None:
    from selfevolve.errors import SelfEvolveError
    from selfevolve.sweep import make_spec, run_sweep

    _quiet_libraries()
    try:
        spec = make_spec(args or [])
        summary = run_sweep(spec, console=err)
    except SelfEvolveError as e:
        _fail(str(e))
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
    context_settings={"help_option_names": ["-h", "--help"]},
)
def eval_cmd(
    run_dir: Path = typer.Argument(..., metavar="RUN_OR_CHECKPOINT_DIR"),
    overrides: list[str] = typer.Argument(None, metavar="[eval.KEY=VALUE ...]"),
    general: bool = typer.Option(False, "--general", help="Also score 20 general questions the base model answers "
                                 "correctly, for the run and for its base model (eval.general=true)."),
) -> None:
    from selfevolve.errors import SelfEvolveError

    _quiet_libraries()
    try:
        from selfevolve.train.run import evaluate_checkpoint

        result = evaluate_checkpoint(run_dir, [*(overrides or []), *(["eval.general=true"] if general else [])])
    except SelfEvolveError as e:
        _fail(str(e))
    except KeyboardInterrupt as stop:  # Ctrl-C: 130; SIGTERM: 143 (train/signals.py)
        raise typer.Exit(exit_code(stop))
    for k, v in result.items():
        out.print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")


EXPLORE_HELP = """Self-questioning: explore a tool world (or FrozenLake, Sokoban) with the policy, write training tasks from what it found,
keep those whose reference solution executes, and report what each filter removed. Options as for train
(questioning.* keys; see `selfevolve train --help`), e.g.:

    selfevolve explore env.name=shop questioning.explorations=16 questioning.out=runs/questions

Then train on the tasks: selfevolve train env.name=shop env.tasks_file=runs/questions/tasks.jsonl env.split=synth"""


@app.command(
    cls=Command,
    help=EXPLORE_HELP,
    short_help="Explore a world and write training tasks from it (self-questioning).",
    context_settings={"help_option_names": ["-h", "--help"]},
)
def explore(args: list[str] = typer.Argument(None, metavar="[FILE.yaml] [KEY=VALUE ...]")) -> None:
    def run(cfg):
        from selfevolve.questioning.pipeline import run_questioning

        return run_questioning(cfg, console=err)

    _, report = _with_config(args, run)
    out.print(f"kept {report['kept']} tasks in {report['tasks_file']} · removed {report['removed']}")


EVOLVE_HELP = """Self-evolution from zero human-written training tasks: rounds of exploring with the policy, turning what
it reached into tasks verified by replay (hindsight), behaviour cloning on their reference paths, RL on them drawn
by learnability with replayed successes beside the RL loss, and held-out evaluation on the environment's test
split. Options as for train (evolve.* keys; train.steps RL updates in all, split over evolve.rounds), e.g.:

    selfevolve evolve env.name=frozenlake evolve.rounds=3 train.out_dir=runs/evolve

Writes RUN/evolve.md (what the run saw, each round's tasks, pool, imitation, RL and held-out success),
evolve.png and round-R/ folders (explorations, pool, the round's training run); train.resume=true continues."""


@app.command(
    help=EVOLVE_HELP,
    short_help="Improve from tasks the agent writes for itself (explore, hindsight tasks, imitation, RL).",
    context_settings={"help_option_names": ["-h", "--help"]},
)
def evolve(args: list[str] = typer.Argument(None, metavar="[FILE.yaml] [KEY=VALUE ...]")) -> None:
    def run(cfg):
        from selfevolve.evolve import Evolver

        return Evolver(cfg, console=err).run()

    cfg, summary = _with_config(args, run)
    curve = " → ".join(f"{p['success']:.3f}" for p in summary["curve"] if p["success"] is not None)
    out.print(f"done: {summary['rounds']} rounds in {cfg.train.out_dir} · held-out success {curve} · pool "
              f"{summary['pool']} tasks · {Path(cfg.train.out_dir) / 'evolve.md'}", highlight=False, soft_wrap=True)


VIEW_HELP = """Write a run folder's trajectories as one self-contained HTML page (no network needed to open it): metric
curves, steps with their groups side by side, every turn with its prompt, reply tokens (coloured by log-prob,
entropy or advantage), rewards and credit, search trees, filters, text search and chat JSONL export
(docs/viewer.md). --serve serves the same page from a local server that sends each step on demand (large runs)."""


@app.command(
    cls=Command,
    help=VIEW_HELP,
    short_help="View a run's trajectories in the browser (one HTML file, or --serve).",
    context_settings={"help_option_names": ["-h", "--help"]},
)
def view(
    run_dir: Path = typer.Argument(..., metavar="RUN"),
    out_file: Optional[Path] = typer.Option(None, "--out", help="HTML file to write (default: RUN/view.html)."),
    serve: bool = typer.Option(False, "--serve", help="Serve the viewer over HTTP instead of writing a file."),
    host: str = typer.Option("127.0.0.1", help="--serve: address to listen on."),
    port: int = typer.Option(VIEW_PORT, help="--serve: port (0: any free port)."),
) -> None:
    from selfevolve.errors import SelfEvolveError
    from selfevolve.view.load import load_run
    from selfevolve.view.sweep import is_sweep, write_sweep

    _check_port(port)
    if is_sweep(run_dir) and not serve:  # a sweep folder: its seeds side by side, a link into each seed's page
        try:
            target, seeds = write_sweep(run_dir, out_file)
        except (SelfEvolveError, OSError) as e:
            _fail(str(e))
        out.print(f"wrote {target}: the sweep, with links to {seeds} seed pages", highlight=False, soft_wrap=True)
        return
    try:
        run = load_run(run_dir)
    except SelfEvolveError as e:
        _fail(str(e))
    skipped = "".join(f" · {n} bad line(s) in {name} skipped" for name, n in run.summary["skipped"].items())
    notes = "".join(f" · {note}" for note in run.summary["notes"])
    evals = run.summary["evals"]
    held_out = f", {len(evals)} evaluations of {sum(e['n'] for e in evals)} episodes" if evals else ""
    shown = f"{len(run.summary['index'])} trajectories, {len(run.summary['steps'])} steps{held_out}{skipped}{notes}"
    if serve:
        from selfevolve.view.serve import make_server

        try:
            server = make_server(run, host, port)
        except OSError as e:
            _listen_failed(host, port, e)
        h, p = server.server_address[:2]
        out.print(f"serving {shown} at http://{h}:{p}/ (Ctrl-C stops)", highlight=False, soft_wrap=True)
        out.file.flush()  # the address must show at once, also when stdout is a pipe
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return
    from selfevolve.view.page import write_html

    target = out_file or run_dir / "view.html"
    try:
        size = write_html(run, target)
    except OSError as e:
        _fail(f"cannot write {target} ({e.strerror or e})")
    out.print(f"wrote {target} ({size / 1e6:.1f} MB): {shown}", highlight=False, soft_wrap=True)
    if size > 50e6:  # the browser parses the whole file before the page shows (docs/viewer.md, large runs)
        out.print("a page this large takes seconds to open; `selfevolve view RUN --serve` sends each step on demand",
                  highlight=False, soft_wrap=True)


SERVE_HELP = """Serve a run folder (its latest checkpoint) or a checkpoint folder over an OpenAI-compatible HTTP API:
GET /v1/models, POST /v1/chat/completions and /v1/completions (token ids in every choice's token_ids, log-probs
with logprobs), concurrent requests batched into one generation. See docs/serving.md."""


@app.command(
    cls=Command,
    help=SERVE_HELP,
    short_help="Serve a run over an OpenAI-compatible HTTP API (chat, completions, token ids).",
    context_settings={"help_option_names": ["-h", "--help"]},
)
def serve(
    run_dir: Path = typer.Argument(..., metavar="RUN_OR_CHECKPOINT_DIR"),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface; docs/security.md)."),
    port: int = typer.Option(SERVE_PORT, help="Port (0: any free port)."),
    model_name: Optional[str] = typer.Option(None, help="Model id clients send (default: the run folder's name)."),
    max_tokens: int = typer.Option(512, min=1, help="Largest reply budget a request may ask for."),
    max_prompt_tokens: int = typer.Option(4096, min=1, help="Longest prompt accepted, in tokens."),
    max_batch: int = typer.Option(16, min=1, help="Rows (prompts x n) generated together at most."),
    batch_window_ms: float = typer.Option(50.0, min=0, help="How long the first request waits for others to join."),
    request_timeout: float = typer.Option(300.0, min=1, help="Seconds before a request without a reply gets a 504."),
    adapter_scale: float = typer.Option(1.0, min=0.0, max=4.0, help="Weight of the trained LoRA update: 1 as "
                                        "trained, 0 the base model (docs/serving.md, what training does to the "
                                        "rest of the model)."),
) -> None:
    from selfevolve.errors import SelfEvolveError

    _check_port(port)
    _quiet_libraries()
    from selfevolve.serve.app import Server, ServeOptions, bind, create_app, load_served_run, limits_for

    try:
        sock = bind(host, port)  # before the model loads: a port in use is told at once
    except OSError as e:
        _listen_failed(host, port, e)
    try:
        policy, _, step = load_served_run(run_dir, adapter_scale)
    except SelfEvolveError as e:
        sock.close()
        _fail(str(e))
    # the run's name also for a checkpoint folder (runs/x/checkpoints/step-20 is served as "x", not "step-20")
    folder = run_dir.resolve()
    name = model_name or (folder.parent.parent.name if (folder / "state.json").is_file() else folder.name)
    opts = ServeOptions(limits=limits_for(policy, max_tokens, max_prompt_tokens), max_batch=max_batch,
                        window=batch_window_ms / 1000, request_timeout=request_timeout)
    server = Server(create_app(policy, name, opts), sock)
    out.print(f"serving {run_dir} (checkpoint step {step}) as model {name!r} at {server.url}/v1 (Ctrl-C stops)",
              highlight=False, soft_wrap=True)
    out.file.flush()  # the address must show at once, also when stdout is a pipe
    try:
        server.run()  # uvicorn shuts down gracefully on Ctrl-C / SIGTERM, then re-raises the signal
    except KeyboardInterrupt as stop:  # Ctrl-C: 130; SIGTERM: 143, as every command (train/signals.py)
        raise typer.Exit(exit_code(stop))
    finally:
        sock.close()


EXPORT_HELP = """Merge a run's LoRA adapter into its base model and write a standalone Hugging Face model folder
(safetensors weights, config, tokenizer), loadable with AutoModelForCausalLM.from_pretrained(DIR) — no
selfevolve or peft needed. The folder is reloaded and its logits compared with the adapter model's before the
command reports success."""


@app.command(
    cls=Command,
    help=EXPORT_HELP,
    short_help="Export a run as a standalone Hugging Face model folder (adapter merged, logits checked).",
    context_settings={"help_option_names": ["-h", "--help"]},
)
def export(
    run_dir: Path = typer.Argument(..., metavar="RUN_OR_CHECKPOINT_DIR"),
    out_dir: Path = typer.Option(..., "--out", help="Folder to write (must not exist, or be empty)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out folder."),
) -> None:
    from selfevolve.errors import SelfEvolveError

    _quiet_libraries()
    try:
        from selfevolve.export import export_run

        report = export_run(run_dir, out_dir, overwrite=overwrite)
    except SelfEvolveError as e:
        _fail(str(e))
    except KeyboardInterrupt as stop:
        raise typer.Exit(exit_code(stop))
    out.print(f"exported {run_dir} (checkpoint step {report['checkpoint_step']}) to {out_dir}: max |logit "
              f"difference| {report['max_abs_logit_diff']:.2e} over {report['positions']} positions",
              highlight=False, soft_wrap=True)


BENCH_HELP = """Compare an agent with the untrained model and the random valid policy on a list of environments:
one table (markdown, and JSON with --out) of greedy success, pass@k (eval.pass_k=K), the untrained model's greedy
success and the random valid policy's success, on the same held-out tasks. SUITE_OR_LIST is a suite (builtin,
textarena, twx, rg), names separated by commas (twx:coin,rg:maze,frozenlake) or a YAML file of {name, options}.
--agent is a run folder, an exported model folder, or openai:MODEL with llm_api.base_url=URL; without it the
untrained model (model.name) is benchmarked. Overrides: eval.episodes=N, eval.pass_k=K, model.name, agent.*,
llm_api.*, e.g.:

    selfevolve bench twx,rg --agent runs/default eval.episodes=16 --out runs/bench"""


@app.command(
    help=BENCH_HELP,
    short_help="Compare an agent, the untrained model and a random policy on a list of environments.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
def bench(
    suite: str = typer.Argument(..., metavar="SUITE_OR_LIST"),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE ...]"),
    agent: Optional[str] = typer.Option(None, "--agent", help="Run folder, exported model folder or openai:MODEL."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder to write bench.md and bench.json to."),
) -> None:
    def run(cfg):
        from selfevolve.bench import run_bench

        return run_bench(suite, cfg, agent, out_dir, console=err)

    _, report = _with_config(overrides or [], run)
    out.print(report["markdown"], highlight=False, soft_wrap=True, markup=False)


def main() -> None:
    try:
        with stop_on_sigterm():
            app()
    except KeyboardInterrupt as stop:
        sys.exit(exit_code(stop))


if __name__ == "__main__":
    main()
