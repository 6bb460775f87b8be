"""Throughput of ``selfevolve serve`` at concurrency 1 and 8: requests/s, generated tokens/s, latency p50/p95.

The real command serves a run in a subprocess (``selfevolve serve RUN --port 0``); this process sends
``--requests`` chat requests (greedy, ``--max-tokens`` each, every prompt different) through the openai client
from 1 and then 8 threads, after two warm-up requests. The server's ``/health`` gives the generate calls made,
so the mean batch (rows per call) shows how much the batcher merged. Without ``--run`` a run folder is made
first: ``--model``'s weights with a random non-zero LoRA adapter (throughput does not depend on what the adapter
learnt, only on its being applied).

    OMP_NUM_THREADS=1 python benchmarks/bench_serve.py --model tiny
    OMP_NUM_THREADS=1 python benchmarks/bench_serve.py --model smollm2-135m --requests 16
    OMP_NUM_THREADS=1 python benchmarks/bench_serve.py --model tiny --batch-window-ms 10
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def make_run(root: Path, model: str) -> Path:
    """A checkpoint of ``model`` whose LoRA B matrices are random (a fresh adapter's are zero)."""
    import torch
    import yaml

    from selfevolve.config import load_config
    from selfevolve.train.checkpoint import save_checkpoint
    from selfevolve.train.trainer import build_policy

    cfg = load_config(overrides=[f"model.name={model}", f"train.out_dir={root}"])
    policy = build_policy(cfg)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    save_checkpoint(root, 1, adapter=policy.adapter_state(), optimizer=None, state={"task_cursor": 0}, rng={},
                    config_yaml=yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return root


def start_server(run: Path, max_batch: int, window_ms: float) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen([sys.executable, "-m", "selfevolve.cli", "serve", str(run), "--port", "0",
                             "--model-name", "bench", "--max-batch", str(max_batch),
                             "--batch-window-ms", str(window_ms)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    found = re.search(r"at (http://\S+)/v1", line)
    if not found:
        proc.kill()
        raise SystemExit(f"the server did not start: {line}{proc.stderr.read()}")
    return proc, found.group(1)


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=30) as r:
        return json.loads(r.read())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(client, url: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    def one(k: int):
        t0 = time.perf_counter()
        reply = client.chat.completions.create(
            model="bench", max_tokens=max_tokens, temperature=0,
            messages=[{"role": "user", "content": f"Request {k} at concurrency {concurrency}: which way now?"}])
        return time.perf_counter() - t0, reply.usage.completion_tokens

    before = health(url)
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(requests)))
    wall = time.perf_counter() - start
    after = health(url)
    latencies = [r[0] for r in results]
    tokens = sum(r[1] for r in results)
    calls = after["batches"] - before["batches"]
    return {"concurrency": concurrency, "requests": requests, "wall_s": wall, "requests_per_s": requests / wall,
            "tokens_per_s": tokens / wall, "tokens": tokens, "p50_s": statistics.median(latencies),
            "p95_s": percentile(latencies, 0.95), "generate_calls": calls,
            "mean_batch": (after["rows"] - before["rows"]) / max(calls, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="run folder to serve (default: make one of --model)")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--batch-window-ms", type=float, default=50.0, help="selfevolve serve --batch-window-ms")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args()
    from openai import OpenAI

    with tempfile.TemporaryDirectory() as tmp:
        run = args.run or make_run(Path(tmp) / "run", args.model)
        proc, url = start_server(run, args.max_batch, args.batch_window_ms)
        try:
            client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
            measure(client, url, 1, 2, args.max_tokens)  # warm-up
            rows = [measure(client, url, c, args.requests, args.max_tokens) for c in (1, 8)]
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"\nmodel {args.model}, {args.requests} requests, max_tokens {args.max_tokens}, greedy, batch window "
          f"{args.batch_window_ms:g} ms, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}\n")
    print("| concurrency | requests/s | tokens/s | latency p50 | latency p95 | generate calls | mean batch |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['requests_per_s']:.2f} | {r['tokens_per_s']:.1f} | "
              f"{r['p50_s'] * 1000:.0f} ms "
              f"| {r['p95_s'] * 1000:.0f} ms | {r['generate_calls']} | {r['mean_batch']:.1f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    one, eight = rows
    print(f"SUMMARY serve ({args.model}, {args.max_tokens} tokens/request, window {args.batch_window_ms:g} ms): "
          f"concurrency 1: "
          f"{one['requests_per_s']:.2f} req/s, {one['tokens_per_s']:.0f} tok/s, p50 {one['p50_s'] * 1000:.0f} ms; "
          f"concurrency 8: {eight['requests_per_s']:.2f} req/s, {eight['tokens_per_s']:.0f} tok/s, p50 "
          f"{eight['p50_s'] * 1000:.0f} ms, p95 {eight['p95_s'] * 1000:.0f} ms "
          f"(x{eight['tokens_per_s'] / one['tokens_per_s']:.1f} tokens/s)")


if __name__ == "__main__":
    main()
