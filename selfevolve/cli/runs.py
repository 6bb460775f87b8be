"""``selfevolve view``, ``serve``, ``export`` and ``bench``: what is done with a trained run — look at its
trajectories, serve it, export it as a plain model, benchmark it against the untrained model and a random policy."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from selfevolve.cli.base import (
    HELP_OPTIONS,
    SERVE_PORT,
    VIEW_PORT,
    app,
    check_port,
    err,
    fail,
    listen_failed,
    out,
    quiet_libraries,
    with_config,
)
from selfevolve.cli_help import Command
from selfevolve.train.signals import exit_code


VIEW_HELP = """Write a run folder's trajectories as one self-contained HTML page (no network needed to open it): metric
curves, steps with their groups side by side, every turn with its prompt, reply tokens (coloured by log-prob,
entropy or advantage), rewards and credit, search trees, filters, text search and chat JSONL export
(docs/viewer.md). --serve serves the same page from a local server that sends each step on demand (large runs)."""


@app.command(
    cls=Command,
    help=VIEW_HELP,
    short_help="View a run's trajectories in the browser (one HTML file, or --serve).",
    context_settings=HELP_OPTIONS,
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

    check_port(port)
    if is_sweep(run_dir) and not serve:  # a sweep folder: its seeds side by side, a link into each seed's page
        try:
            target, seeds = write_sweep(run_dir, out_file)
        except (SelfEvolveError, OSError) as e:
            fail(str(e))
        out.print(f"wrote {target}: the sweep, with links to {seeds} seed pages", highlight=False, soft_wrap=True)
        return
    try:
        run = load_run(run_dir)
    except SelfEvolveError as e:
        fail(str(e))
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
            listen_failed(host, port, e)
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
        fail(f"cannot write {target} ({e.strerror or e})")
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
    context_settings=HELP_OPTIONS,
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

    check_port(port)
    quiet_libraries()
    from selfevolve.serve.app import Server, ServeOptions, bind, create_app, load_served_run, limits_for

    try:
        sock = bind(host, port)  # before the model loads: a port in use is told at once
    except OSError as e:
        listen_failed(host, port, e)
    try:
        policy, _, step = load_served_run(run_dir, adapter_scale)
    except SelfEvolveError as e:
        sock.close()
        fail(str(e))
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
    context_settings=HELP_OPTIONS,
)
def export(
    run_dir: Path = typer.Argument(..., metavar="RUN_OR_CHECKPOINT_DIR"),
    out_dir: Path = typer.Option(..., "--out", help="Folder to write (must not exist, or be empty)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out folder."),
) -> None:
    from selfevolve.errors import SelfEvolveError

    quiet_libraries()
    try:
        from selfevolve.export import export_run

        report = export_run(run_dir, out_dir, overwrite=overwrite)
    except SelfEvolveError as e:
        fail(str(e))
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
    context_settings=HELP_OPTIONS,
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

    _, report = with_config(overrides or [], run)
    out.print(report["markdown"], highlight=False, soft_wrap=True, markup=False)
