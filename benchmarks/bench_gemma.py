"""Gemma 3 270M (``model.name=gemma-3-270m``, the extra ``selfevolve[gemma]``) beside SmolLM2 on FrozenLake.

    python benchmarks/bench_gemma.py [--models gemma-3-270m,smollm2-135m] [--episodes 4] [--warm 0] [KEY=VALUE ...]

For each model, in fresh processes: the load time of the converted (cached) model and the process's peak memory
after it; then one ``selfevolve train`` step with small settings (its command is printed) and what its run folder
says: wall time, peak memory, the greedy evaluation before and after (success, valid moves: the untrained model's
first), the sampled rollouts' valid moves, and how many replies ended their turn themselves (the end-of-turn
token) rather than at the token budget. The first load of a model converts its GGUF once; run the script twice
to time a cached load only; ``--first-load`` times the conversion alone, into an empty cache folder;
``--turn-end`` shows where Gemma's ``<end_of_turn>`` embedding lies among the other tokens'.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LOAD = """
import resource, time
t = time.perf_counter()
from selfevolve.models.loading import load_model
model, tok = load_model({name!r})
print(round(time.perf_counter() - t, 2), round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
      sum(p.numel() for p in model.parameters()))
"""


def env() -> dict[str, str]:
    e = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
             HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    return e


def load_time(name: str, cache: str | None = None) -> tuple[float, float, int]:
    """(seconds for load_model, the process's peak RSS in GB, parameters) in a fresh process; ``cache``: another
    model cache folder (an empty one times the first load, the GGUF's conversion)."""
    e = env() | ({"SELFEVOLVE_CACHE": cache} if cache else {})
    out = subprocess.run([sys.executable, "-c", LOAD.format(name=name)], env=e, capture_output=True, text=True,
                         check=True, cwd=ROOT)
    secs, gb, n = out.stdout.split()[-3:]
    return float(secs), float(gb), int(n)


def replies(path: Path) -> list[dict]:
    """Every turn of every episode in a trajectories file."""
    if not path.exists():
        return []
    return [s for line in path.read_text().splitlines() for s in json.loads(line)["steps"]]


def ended_turn(steps: list[dict], end_tokens: set[str]) -> str:
    ended = sum(1 for s in steps if s.get("tokens") and s["tokens"]["text"] and s["tokens"]["text"][-1] in end_tokens)
    return f"{ended}/{len(steps)}"


def one_step(name: str, args, out: Path) -> dict:
    cmd = [sys.executable, "-m", "selfevolve.cli", "train", f"model.name={name}", "train.steps=1",
           f"eval.episodes={args.episodes}", f"train.warm_start_steps={args.warm}", f"algo.group_size={args.group}",
           f"train.tasks_per_step={args.tasks}", f"train.warm_start_tasks={args.tasks * args.group}",
           "train.progress=false", f"train.out_dir={out}",
           "train.overwrite=true", *args.overrides]
    print("$", " ".join(cmd[1:]), flush=True)
    t = time.perf_counter()
    subprocess.run(cmd, env=env(), check=True, cwd=ROOT, capture_output=True)
    wall = time.perf_counter() - t
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/success" in r]
    step = next(r for r in rows if "reward/mean" in r)
    ends = {"<end_of_turn>", "<|im_end|>", "<eos>", "<|endoftext|>"}
    train_steps = replies(out / "trajectories.jsonl")
    eval_steps = [s for line in (out / "eval_trajectories.jsonl").read_text().splitlines()
                  if json.loads(line)["step"] == 0 for s in json.loads(line)["steps"]]
    return {
        "wall_s": round(wall, 1),
        "peak_rss_gb": max(r.get("mem/peak_rss_gb", 0) for r in rows),
        "eval_start": f"success {evals[0]['eval/success']:.2f} valid {evals[0]['eval/valid']:.2f}",
        "eval_end": f"success {evals[-1]['eval/success']:.2f} valid {evals[-1]['eval/valid']:.2f}",
        "untrained_greedy_turns_valid": f"{sum(s['valid'] for s in eval_steps)}/{len(eval_steps)}",
        "untrained_greedy_turns_ended": ended_turn(eval_steps, ends),
        "sampled_turns_valid": f"{sum(s['valid'] for s in train_steps)}/{len(train_steps)}",
        "sampled_turns_ended": ended_turn(train_steps, ends),
        "rollout_s": round(step.get("time/rollout", 0), 1),
        "update_s": round(step.get("time/update", 0), 2),
        "grad_norm": round(step.get("grad_norm", 0), 4),
        "warm_loss_bc": next((r["warm/loss_bc_first"] for r in rows if "warm/loss_bc_first" in r), None),
        "time_warm_start_s": round(next((r["time/warm_start"] for r in rows if "time/warm_start" in r), 0), 1),
        "a_greedy_reply": eval_steps[0]["action_text"] if eval_steps else None,
        "a_sampled_reply": train_steps[0]["action_text"] if train_steps else None,
    }


def turn_end_neighbours() -> str:
    """Where Gemma's ``<end_of_turn>`` embedding (tied to the output head) lies: its cosine and distance to a few
    tokens and to the ``<unused…>`` tokens (every 7th of the first 6,000)."""
    import torch
    from safetensors.torch import load_file

    from selfevolve.models.loading import gemma_path, load_tokenizer

    emb = load_file(gemma_path() / "model.safetensors")["model.embed_tokens.weight"]
    tok = load_tokenizer("gemma-3-270m")
    eot = emb[tok.convert_tokens_to_ids("<end_of_turn>")]
    lines = []
    for t in ["<unused5994>", "<start_of_turn>", "<eos>", "Right", "user", "\n"]:
        e = emb[tok.convert_tokens_to_ids(t)]
        lines.append(f"{t!r}: cos {torch.cosine_similarity(e, eot, dim=0):.3f} dist {(e - eot).norm():.3f}")
    unused = emb[[tok.convert_tokens_to_ids(f"<unused{k}>") for k in range(0, 6000, 7)]]
    d = (unused - eot).norm(dim=1)
    lines.append(f"<unused*> ({len(d)}): distance min {d.min():.3f} median {d.median():.3f}")
    return "; ".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gemma-3-270m,smollm2-135m")
    ap.add_argument("--episodes", type=int, default=4, help="held-out evaluation episodes")
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--warm", type=int, default=0, help="warm-start steps")
    ap.add_argument("--out", default=None, help="keep the run folders here (default: a temporary folder)")
    ap.add_argument("overrides", nargs="*", help="more key=value overrides for the run, e.g. agent.temperature=0.5")
    ap.add_argument("--turn-end", action="store_true",
                    help="only show where Gemma's <end_of_turn> embedding lies among the other tokens, then stop")
    ap.add_argument("--first-load", action="store_true",
                    help="only time each model's first load (GGUF conversion) into an empty cache, then stop")
    args = ap.parse_args()
    summary = []
    if args.turn_end:
        print("SUMMARY <end_of_turn> against: " + turn_end_neighbours())
        return
    if args.first_load:
        for name in args.models.split(","):
            with tempfile.TemporaryDirectory() as cache:
                secs, gb, n = load_time(name, cache)
            summary.append(f"{name}: first load (conversion) {secs} s, peak {gb} GB")
        print("SUMMARY " + " ; ".join(summary))
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = args.out or tmp
        for name in args.models.split(","):
            secs, gb, n = load_time(name)
            res = {"load_s": secs, "load_peak_rss_gb": gb, "params_M": round(n / 1e6, 1)}
            res |= one_step(name, args, Path(tmp) / name)
            print(name, json.dumps(res), flush=True)
            summary.append(f"{name}: load {secs} s, {args.warm} warm-start + 1 RL step + 2 evals {res['wall_s']} s, "
                           f"peak {res['peak_rss_gb']} GB, "
                           f"untrained greedy valid turns {res['untrained_greedy_turns_valid']} "
                           f"(ended their turn {res['untrained_greedy_turns_ended']}), sampled valid "
                           f"{res['sampled_turns_valid']}")
    print("SUMMARY " + " ; ".join(summary))


if __name__ == "__main__":
    main()
