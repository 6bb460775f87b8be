"""selfevolve against TRL's GRPOTrainer: one single-turn GRPO step, same model, LoRA, prompts, seeds and reward.

Each optimizer step consumes 4 prompts x 8 sampled completions on both sides: selfevolve through its public API
(``selfevolve.Trainer(cfg, env=DigitGuess).train_step()``: its rollout sampler, GRPO credit and PPO-clip update),
TRL 1.16 through ``GRPOTrainer.train()`` with ``steps_per_generation=1`` and ``num_iterations=1``, its other
settings its defaults (gradient checkpointing on; ``--no-trl-grad-ckpt`` turns it off). The model is
SmolLM2-135M-Instruct in fp32 (the folder selfevolve converts from the embedded GGUF; both load that folder),
LoRA r 16, alpha 32, no dropout, on q/k/v/o. The prompt is selfevolve's chat for the task (system rules, one
example turn, the task), given to TRL as the same messages; both sides print the prompt's token count.

Two rewards on the same guessing game ("guess my secret digit, 0-9"):
- sparse: the reply is one digit; 1 when it is the secret, else 0 -- most groups of 8 get no reward spread;
- dense: the reply is a digit and a reason; TRL's quickstart length reward, -|20 - len(reply)| / 20 -- replies
  of different lengths, so every group has a spread (the share without is printed).
Each at 8 and 32 reply tokens. Every measurement is its own subprocess (a clean peak RSS, the model loaded
fresh); the two libraries alternate, ``--rounds`` times per setting, the first ``--warmup`` steps of each process
not counted. Printed: per-step medians of rollout, update and total, TRL's total over selfevolve's, each side's
peak RSS (the process's ``ru_maxrss``: model load included), the share of groups without reward spread; last, a
SUMMARY line.

TRL is an optional extra (``pip install 'selfevolve[peers]'``). Where it is not in this Python, point
``--peer-python`` at a Python that has it and sees the same torch/transformers/peft (here: a venv beside the
shared one, since trl brings datasets, pyarrow and pandas, which ``transformers.Trainer`` imports whenever they
are installed).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_vs_trl.py --peer-python /work/venv-peers/bin/python

Multi-turn (``frozenlake``): selfevolve's default FrozenLake (4x4, one move per turn), episodes of up to 3 turns,
8 reply tokens a turn. TRL's own tool loop does not take SmolLM2's chat template (``--check-tools`` prints what
TRL 1.16 says), so its side plays the episodes in a ``rollout_func`` (TRL's experimental custom-rollout hook,
``vs_trl_peer.frozenlake_rollout``) on the same environment; the observations are masked out of its loss
(``env_mask``). See docs/benchmarks.md, "Against TRL".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS_PER_STEP, GROUP = 4, 8
LR = 2e-4  # selfevolve's default algo.lr, given to TRL too (TRL's own default is 1e-6)
FROZENLAKE = {"max_turns": 3}  # the multi-turn comparison: selfevolve's default FrozenLake (4x4), 3 turns

# ---- the task, shared by both sides (plain Python: the TRL process imports no selfevolve) -----------------------
# Each regime's rules and example turn. Asked for one digit, the model's replies have nearly all the same length
# (a group of 8 single digits has no spread under the length reward), so the dense regime asks for a reason too.
RULES = "We play a guessing game. I think of a secret digit from 0 to 9."
TASKS = {
    "sparse": (f"{RULES} Answer with one digit.", [("Round 1000: guess my secret digit (0-9).", "4")]),
    "dense": (f"{RULES} Guess it and say in a few words why.",
              [("Round 1000: guess my secret digit (0-9).", "4, because it is my lucky digit.")]),
}


def observation(seed: int) -> str:
    return f"Round {seed}: guess my secret digit (0-9)."


def secret(seed: int) -> int:
    return random.Random(seed).randint(0, 9)


def reward(regime: str, seed: int, reply: str) -> float:
    """sparse: 1 for the secret digit (the reply's first digit), else 0. dense: TRL's quickstart reward
    -|20 - len(reply)|, divided by 20 -- any two replies of different length differ."""
    if regime == "sparse":
        digit = re.search(r"\d", reply)
        return float(digit is not None and int(digit.group()) == secret(seed))
    return -abs(20 - len(reply)) / 20


def peak_rss_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def digit_guess_env():
    """The task as a selfevolve environment (a one-turn episode), built on demand: only the selfevolve side
    imports selfevolve."""
    from selfevolve.envs import StepResult, TextEnv

    class DigitGuess(TextEnv):
        name = "digit_guess"
        instructions, examples = TASKS["sparse"]
        max_turns = 1

        def __init__(self, reward: str = "sparse"):
            if reward not in TASKS:
                raise ValueError(f"reward must be sparse or dense, got {reward!r}")
            self.regime, self.seed = reward, 0
            self.instructions, self.examples = TASKS[reward]

        def reset(self, seed: int) -> str:
            self.seed = seed
            return observation(seed)

        def step(self, action: str) -> StepResult:
            r = reward(self.regime, self.seed, action)
            return StepResult("The round is over.", r, True, {"success": r == 1.0, "valid_action": True})

        def state_key(self) -> str:
            return str(self.seed)

    return DigitGuess


# ---- the plan: the same tasks and prompts for both sides ---------------------------------------------------------
def make_plan(args, work: Path) -> dict:
    """Model folders, the task seeds of every step (selfevolve's own training stream) and their chat messages."""
    from selfevolve.agent.prompt import PromptBuilder
    from selfevolve.tasks.source import SeedTasks

    if args.model == "tiny":  # one random tiny model saved once: both sides load the same weights
        from selfevolve.models.loading import load_model

        model, tok = load_model("tiny", "fp32", seed=args.seed)
        folder = work / "tiny-model"
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        se_model = trl_model = str(folder)
    else:
        from selfevolve.models.loading import smollm2_path

        se_model, trl_model = "smollm2-135m", str(smollm2_path())
    n = PROMPTS_PER_STEP * (args.warmup + args.steps)
    seeds = [t.seed for t in SeedTasks(digit_guess_env().name, seed=args.seed).next(n)]
    tasks = {}
    for regime, (rules, examples) in TASKS.items():
        builder = PromptBuilder(None, instructions=rules, examples=list(examples))  # build_prompt's defaults
        tasks[regime] = [{"seed": s, "messages": builder.messages([observation(s)], [])} for s in seeds]
    return {"se_model": se_model, "trl_model": trl_model, "tasks": tasks, "fl_tasks": frozenlake_tasks(args.seed, n),
            "seed": args.seed, "warmup": args.warmup, "steps": args.steps}


def frozenlake_tasks(seed: int, n: int) -> list[dict]:
    """The first ``n`` FrozenLake tasks of selfevolve's training stream and their first prompt's messages."""
    from selfevolve.agent.prompt import PromptBuilder
    from selfevolve.envs import make_env
    from selfevolve.tasks.source import SeedTasks

    env = make_env("frozenlake", **FROZENLAKE)
    builder = PromptBuilder(None, instructions=env.instructions, examples=list(env.examples))
    return [{"seed": t.seed, "messages": builder.messages([env.reset(t.seed)], [])}
            for t in SeedTasks("frozenlake", seed=seed).next(n)]


# ---- one side, in its own process --------------------------------------------------------------------------------
def run_selfevolve(plan: dict, regime: str, tokens: int, out_dir: Path) -> dict:
    from rich.console import Console

    from selfevolve import Trainer, load_config

    cfg = load_config(overrides=[
        f"model.name={plan['se_model']}", "model.dtype=fp32", "model.lora.r=16", "model.lora.alpha=32",
        f"agent.max_new_tokens={tokens}", "agent.temperature=1.0", "algo.name=grpo",
        f"algo.group_size={GROUP}", f"train.tasks_per_step={PROMPTS_PER_STEP}", f"algo.lr={LR}",
        f"seed={plan['seed']}", f"train.out_dir={out_dir}", "train.progress=false",
        "train.log_trajectories=false", "eval.at_start=false",
        *([f"env.{k}={v}" for k, v in FROZENLAKE.items()] if regime == "frozenlake" else [f"env.reward={regime}"]),
    ])
    env = None if regime == "frozenlake" else digit_guess_env()  # frozenlake: the built-in env.name default
    trainer = Trainer(cfg, env=env, console=Console(stderr=True, quiet=True))
    tasks = plan["fl_tasks"] if regime == "frozenlake" else plan["tasks"][regime]
    prompt_tokens = len(trainer.builder.render(tasks[0]["messages"]))
    steps = []
    for _ in range(plan["warmup"] + plan["steps"]):
        t0 = time.perf_counter()
        m = trainer.train_step()
        steps.append({"total": time.perf_counter() - t0, "rollout": m["time/rollout"], "update": m["time/update"],
                      "metrics": {k: v for k, v in m.items() if isinstance(v, (int, float))}})
    trainer.close()
    return {"steps": steps, "prompt_tokens": prompt_tokens, "peak_rss_gb": peak_rss_gb()}


def worker(args) -> None:
    # On a machine shared with other runs, the kernel's OOM killer must pick this measurement, not them.
    Path("/proc/self/oom_score_adj").write_text("1000")
    plan = json.loads(Path(args.plan).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        if args.side == "selfevolve":
            result = run_selfevolve(plan, args.regime, args.tokens, Path(tmp) / "run")
        else:
            from vs_trl_peer import run_trl  # this folder is on sys.path: the script's own

            result = run_trl(plan, args.regime, args.tokens, Path(tmp) / "run", args.trl_grad_ckpt)
    Path(args.result).write_text(json.dumps(result))


# ---- the driver ---------------------------------------------------------------------------------------------------
NEED_GB = {"selfevolve": 4.5, "trl": 9.0, "trl_ckpt": 5.0}  # a little above each side's peak RSS at 32 tokens


def available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024 / 1e9
    return float("inf")


def wait_for_memory(need: float) -> None:
    """Start a measurement only when the machine has its memory free: on a shared machine a TRL process at 8 GB
    would otherwise push another run into the OOM killer."""
    told = False
    while (free := available_gb()) < need:
        if not told:
            print(f"  (waiting for {need:.1f} GB of free memory; {free:.1f} GB now)", flush=True)
            told = True
        time.sleep(10)
def launch(python: str, side: str, regime: str, tokens: int, plan_file: Path, work: Path, args) -> dict:
    result = work / f"{side}-{regime}-{tokens}-{time.monotonic_ns()}.json"
    cmd = [python, __file__, "--worker", "--side", side, "--regime", regime, "--tokens", str(tokens),
           "--plan", str(plan_file), "--result", str(result), "--trl-grad-ckpt" if args.trl_grad_ckpt else
           "--no-trl-grad-ckpt"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(args.threads),
           "MKL_NUM_THREADS": str(args.threads), "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}
    need = NEED_GB[side] if side == "selfevolve" or not args.trl_grad_ckpt else NEED_GB["trl_ckpt"]
    need *= 0.45 if args.model == "tiny" else 1.0 if tokens > 8 else 0.75
    for attempt in range(3):  # the OOM killer picks a worker first (oom_score_adj): wait for memory and rerun it
        wait_for_memory(need)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != -9:
            break
        print(f"  ({side} {regime} {tokens}: killed for memory, attempt {attempt + 1}; running it again)", flush=True)
    if proc.returncode != 0:
        sys.exit(f"{side} {regime} {tokens} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    out = json.loads(result.read_text())
    out["process_s"] = time.perf_counter() - t0
    return out


def median_of(results: list[dict], key: str, warmup: int) -> float:
    return statistics.median(s[key] for r in results for s in r["steps"][warmup:])


def zero_spread(results: list[dict], side: str, warmup: int) -> float | None:
    """Share of groups whose 8 rewards are all equal, as each side logs it."""
    vals = []
    for r in results:
        for s in r["steps"][warmup:]:
            m = s["metrics"]
            if side == "trl":
                vals.append(m.get("frac_reward_zero_std"))
            else:
                vals.append(m.get("filter/zero_std_frac"))
    vals = [v for v in vals if v is not None]
    return statistics.mean(vals) if vals else None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peer-python", default=sys.executable, help="a Python with trl==1.16.0 (default: this one)")
    p.add_argument("--model", default="smollm2-135m", choices=["smollm2-135m", "tiny"])
    p.add_argument("--regimes", default="sparse,dense,frozenlake", help="frozenlake: the 3-turn comparison")
    p.add_argument("--frozenlake-tokens", type=int, default=8, help="reply budget of a FrozenLake turn")
    p.add_argument("--tokens", default="8,32", help="reply token budgets")
    p.add_argument("--steps", type=int, default=3, help="measured steps per process")
    p.add_argument("--warmup", type=int, default=1, help="first steps of each process, not counted")
    p.add_argument("--rounds", type=int, default=2, help="processes per side and setting, alternated")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of both sides")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sides", default="selfevolve,trl")
    p.add_argument("--trl-grad-ckpt", action=argparse.BooleanOptionalAction, default=True,
                   help="TRL's gradient checkpointing, on by default in GRPOConfig (--no-trl-grad-ckpt: off, the "
                   "same forward and backward as selfevolve, at more memory)")
    p.add_argument("--check-tools", action="store_true", help="only: does TRL's tool loop take SmolLM2's template?")
    p.add_argument("--json", help="write every measurement here")
    # the worker's own options (one side, one setting)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--regime", help=argparse.SUPPRESS)
    p.add_argument("--plan", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args, _ = p.parse_known_args(argv)
    if args.worker:
        args.tokens = int(args.tokens)
        return worker(args)
    sides = args.sides.split(",")
    if "trl" in sides:
        probe = subprocess.run([args.peer_python, "-c", "import trl; print(trl.__version__)"], capture_output=True,
                               text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if probe.returncode != 0:
            sys.exit(f"trl is not importable by {args.peer_python}: pip install 'selfevolve[peers]' there, or pass "
                     f"--peer-python")
        trl_version = probe.stdout.strip()
    else:
        trl_version = "-"
    if args.check_tools:
        from selfevolve.models.loading import smollm2_path

        code = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import vs_trl_peer as p; "
                f"print(p.check_tools({str(smollm2_path())!r}))")
        out = subprocess.run([args.peer_python, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})
        print(f"TRL {trl_version} GRPOTrainer(tools=[move]) with SmolLM2-135M-Instruct's tokenizer: "
              f"{out.stdout.strip() or out.stderr.strip()[-2000:]}")
        return None
    import torch
    import transformers
    import peft

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, "
          f"trl {trl_version}; model {args.model} fp32, LoRA r16 a32 q/k/v/o; {PROMPTS_PER_STEP} prompts x {GROUP} "
          f"per step; OMP_NUM_THREADS={args.threads}; {args.rounds} processes x {args.steps} steps (+{args.warmup} "
          f"warm-up) per side and setting; TRL gradient checkpointing "
          f"{'on (its default)' if args.trl_grad_ckpt else 'off'}; load {os.getloadavg()[0]:.1f}", flush=True)
    all_results, summary = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plan_file = work / "plan.json"
        plan_file.write_text(json.dumps(make_plan(args, work)))
        pythons = {"selfevolve": sys.executable, "trl": args.peer_python}
        regimes = args.regimes.split(",")
        # token budgets in the order given (the smaller first: less memory), FrozenLake after its own budget's
        settings = [(r, int(t)) for t in args.tokens.split(",") for r in regimes if r != "frozenlake"]
        if "frozenlake" in regimes:
            at = sum(t <= args.frozenlake_tokens for _, t in settings)
            settings.insert(at, ("frozenlake", args.frozenlake_tokens))
        for regime, tokens in settings:
            res = {s: [] for s in sides}
            for rnd in range(args.rounds):  # alternate: selfevolve first in even rounds, TRL first in odd ones
                for side in (sides if rnd % 2 == 0 else sides[::-1]):
                    r = launch(pythons[side], side, regime, tokens, plan_file, work, args)
                    res[side].append(r)
                    all_results.append({"side": side, "regime": regime, "tokens": tokens, "round": rnd, **r})
                    if args.json:  # after every process: a run stopped part way keeps what it measured
                        Path(args.json).write_text(json.dumps(all_results, indent=1))
            line = {}
            for side in sides:
                rows = res[side]
                med = {k: median_of(rows, k, args.warmup) for k in ("rollout", "update", "total")}
                zs = zero_spread(rows, side, args.warmup)
                line[side] = med
                print(f"{regime:6s} {tokens:2d} tok  {side:10s} rollout {med['rollout']:6.2f} s  update "
                      f"{med['update']:6.2f} s  total {med['total']:6.2f} s  peak RSS "
                      f"{max(r['peak_rss_gb'] for r in rows):.2f} GB  prompt {rows[0]['prompt_tokens']} tok  "
                      f"groups without spread {'-' if zs is None else f'{zs:.0%}'}", flush=True)
            if len(sides) == 2:
                ratio = line["trl"]["total"] / line["selfevolve"]["total"]
                print(f"{regime:6s} {tokens:2d} tok  TRL / selfevolve per step: {ratio:.2f}x (rollout "
                      f"{line['trl']['rollout'] / line['selfevolve']['rollout']:.2f}x, update "
                      f"{line['trl']['update'] / line['selfevolve']['update']:.2f}x)", flush=True)
                summary.append(f"{regime}{tokens}={ratio:.2f}x")
    print("SUMMARY selfevolve vs TRL step rate: " + (" ".join(summary) or "one side only"))


if __name__ == "__main__":
    main()
