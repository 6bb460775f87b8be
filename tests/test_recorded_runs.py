"""Behaviour held fixed: short runs on the tiny model give the trajectories and metrics recorded in
``tests/data/recorded_runs.json``.

The record was written by the code before a restructuring (the objectives, the sampler interface, the typed
trajectories of issue 40), with ``python tests/test_recorded_runs.py --record``, and written again at 3febb80 (main
with the content-disjoint held-out splits, before issue 40's branch and the suites' were merged into it) and at
5f45261 (the update's shared prefix encoded once for all micro-batches: one run's step-2 metrics moved in the 7th
digit, every trajectory digest stayed), and at 42dd5c0 (the metric ``update/sampler_kl`` added to every step with
an update; nothing else moved); a change that is meant to keep behaviour must keep these runs identical. Between them they pass through every estimator and update (GRPO, RLOO,
GiGPO, PPO, Self-AC both forwards and both ratios), SELAUR shaping, filtering, the KL term, the warm start, step
attribution, the judge, every search strategy with every value scorer, SEER recall and self-navigating.

What is compared: each run's logged files, line by line as canonical JSON (sorted keys), hashed — the
trajectories with their advantages, values, token log-probs and entropies, the search trees, the LLM calls —
and every number of ``metrics.jsonl`` except wall-clock times. The runs use one torch thread, as the record did; numbers are
compared to 1e-9 relative (the record was identical to the last bit on the machine that wrote it).

**One record per kind of CPU.** The last bits of a matrix product depend on the CPU the kernels were chosen for,
and the tiny model's logits are so flat that a sampled token follows them: the record written on the AMD EPYC of
2026-11-29 differs from what the same code gives on the Intel Xeon (family 6, model 207, AMX) of 2026-12-02 in
every one of the 20 runs (metrics in the 6th–7th digit, and 8 runs' trajectories). So the file holds a record per
CPU kind (:func:`machine`: vendor, family, model and torch version), and the test compares with this machine's,
or with its vendor's and torch version's where no record names the model (the first record's AMD EPYC, whose
model number was not kept; another AMD CPU whose last bits differ fails there, as it did before this split). On a CPU with neither it is skipped, and says how to record one: with the code *before* a change, on that
machine, ``python tests/test_recorded_runs.py --record``. The Intel record was written at c7a66b4 (main before
``model.sampler_dtype``), the code the AMD record held as well.

A change that is MEANT to change behaviour re-records, and says why in its commit: on each CPU kind the file holds,
or it deletes the records it could not write again (their tests then skip on those CPUs, and say so).
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import sys
from pathlib import Path

import pytest
import torch

from selfevolve import StepResult, TextEnv, Trainer, load_config
from selfevolve.envs.games.frozenlake import MOVES, FrozenLakeEnv

RECORD = Path(__file__).parent / "data" / "recorded_runs.json"


def machine() -> str:
    """The CPU kind and torch version a record's last bits hold for: ``vendor/family/model/torch``."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    vendor = info.get("vendor_id") or platform.processor() or platform.machine()
    return f"{vendor}/{info.get('cpu family', '?')}/{info.get('model', '?')}/torch {torch.__version__}"


def record_for(records: dict[str, dict], key: str) -> dict | None:
    """This machine's record: the one for its exact kind, else the one for its vendor and torch version alone."""
    vendor, *_, torch_version = key.split("/")
    return records.get(key) or records.get(f"{vendor}/{torch_version}")

BASE = ["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=4", "train.tasks_per_step=2",
        "algo.group_size=4", "eval.episodes=2", "train.progress=false", "train.eval_every=0", "train.steps=2",
        "train.warm_start_steps=0", "train.warm_start_tasks=null",
        "train.warm_start_minibatches=1"]  # the record's warm start: one optimizer step a step (default until 11-27)
LAKE = ["env.size=3", "env.max_turns=3"]


class Coin(TextEnv):
    """Any reply is valid; a reply of even length wins, and each turn's state is how many turns were played.
    The tiny model's random replies then win and lose within a group, so every estimator has something to do."""

    name = "coin"
    instructions = "Say something."
    examples = [("Say something.", "hi")]
    max_turns = 3

    def reset(self, seed):
        self.turn = 0
        return "Say something."

    def state_key(self) -> str:
        return str(self.turn)

    def step(self, action):
        self.turn += 1
        win = len(action) % 2 == 0
        return StepResult("yes" if win else "again", float(win), win or self.turn >= self.max_turns,
                          {"success": win, "valid_action": True})


class EasyLake(FrozenLakeEnv):
    """FrozenLake where every reply is a move (its length picks which): the tiny model's random replies walk
    the map, reach the goal or a hole, so rewards, oracle labels and insights differ within a group."""

    name = "easy_lake"

    def step(self, action):
        return super().step(MOVES[len(action) % len(MOVES)])


# name -> (overrides, environment class or None for env.name)
RUNS = {
    "grpo": ([], Coin),
    "grpo-frozenlake": (["env.name=frozenlake", *LAKE], None),
    "rloo+filter": (["algo.name=rloo", "filter.keep=0.5"], Coin),
    "gigpo+selaur": (["algo.name=gigpo", "reward.shaping=selaur"], Coin),
    "ppo+kl+minibatches": (["algo.name=ppo", "algo.kl_coef=0.01", "algo.minibatches=2"], Coin),
    "ppo-lake": (["algo.name=ppo", *LAKE], EasyLake),
    "self_ac": (["algo.name=self_ac"], Coin),
    "self_ac+selaur-lake": (["algo.name=self_ac", "reward.shaping=selaur", *LAKE], EasyLake),
    "self_ac-turn-per_turn+kl": (["algo.name=self_ac", "algo.self_ac.ratio=turn", "algo.self_ac.forward=per_turn",
                                  "algo.minibatches=2", "algo.kl_coef=0.01"], Coin),
    "grpo+warm_start-lake": (["train.warm_start_steps=1", "train.warm_start_tasks=4", "eval.after_warm_start=true",
                              *LAKE], EasyLake),
    "grpo+oracle_attribution-lake": (["reward.attribution=oracle", *LAKE], EasyLake),
    "rloo+llm_attribution": (["algo.name=rloo", "reward.attribution=llm", "attribution.tokens_per_step=8"], Coin),
    "grpo+judge-lake": (["reward.source=judge", "reward.judge_max_new_tokens=8", *LAKE], EasyLake),
    "gigpo+judge_beside-shop": (["algo.name=gigpo", "env.name=shop", "env.max_turns=2", "reward.source=both",
                                 "reward.judge_max_new_tokens=8"], None),
    "best_of_n": (["rollout.search=best_of_n", "search.n=2"], Coin),
    "beam+ppo-value": (["rollout.search=beam", "algo.name=ppo", "search.scorer=value", "search.m=2", "search.beams=2"],
                       Coin),
    "lookahead+self_ac-weighted": (["rollout.search=lookahead", "algo.name=self_ac", "search.scorer=weighted",
                                    "search.w_value=0.5", "search.m=2", "search.depth=1", "search.keep=all"], Coin),
    "seer-shop": (["env.name=shop", "env.max_turns=2", "experience.recall=seer", "experience.seed_examples=2"], None),
    "seer-lake": (["experience.recall=seer", "experience.seed_examples=2", *LAKE], EasyLake),
    "navigate-lake": (["experience.navigate=true", "experience.seed_examples=2", *LAKE], EasyLake),
}

TIMES = ("time/", "tokens_per_s", "_seconds", "/seconds", "_s_per_turn", "mem/")  # wall-clock and memory measurements
VOLATILE = ("seconds", "time", "latency_s")  # keys of logged records that hold wall-clock times


def _canonical(x):
    """A record without its wall-clock fields, for hashing."""
    if isinstance(x, dict):
        return {k: _canonical(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [_canonical(v) for v in x]
    return x


def observe(name: str, out: Path) -> dict:
    """Run ``RUNS[name]`` into ``out``; its metrics (timing left out) and a digest of each logged file."""
    overrides, env = RUNS[name]
    cfg = load_config(overrides=BASE + overrides + [f"train.out_dir={out}"])
    Trainer(cfg, env=env).train()
    metrics = [{k: v for k, v in json.loads(line).items() if not any(t in k for t in TIMES)}
               for line in (out / "metrics.jsonl").read_text().splitlines()]
    digests = {}
    for path in sorted(out.glob("*.jsonl")):
        if path.name == "metrics.jsonl":
            continue
        h = hashlib.sha256()
        for line in path.read_text().splitlines():
            h.update(json.dumps(_canonical(json.loads(line)), sort_keys=True).encode() + b"\n")
        digests[path.name] = h.hexdigest()
    return {"metrics": metrics, "digests": digests}


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b


@pytest.fixture
def one_thread():
    """One torch thread, as the record was made: how a matrix product splits over threads changes its last bits,
    and a sampled token can follow them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", list(RUNS))
def test_a_short_run_gives_what_was_recorded(tmp_path, name, one_thread):
    records = json.loads(RECORD.read_text())
    mine = record_for(records, machine())
    if mine is None:
        pytest.skip(f"no record for this CPU ({machine()}; records: {', '.join(records)}): write one with the code "
                    f"before your change, `python tests/test_recorded_runs.py --record`")
    if name not in mine:
        pytest.skip(f"this CPU's record ({machine()}) has no run {name!r}: write it again with --record")
    recorded = mine[name]
    seen = observe(name, tmp_path / "run")
    assert seen["digests"] == recorded["digests"]
    assert len(seen["metrics"]) == len(recorded["metrics"])
    for got, want in zip(seen["metrics"], recorded["metrics"]):
        assert sorted(got) == sorted(want), (got["step"], set(got) ^ set(want))
        diff = {k: (got[k], want[k]) for k in want if not _same(got[k], want[k])}
        assert not diff, (got["step"], diff)


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    import tempfile

    torch.set_num_threads(1)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in RUNS:
            out[name] = observe(name, Path(tmp) / name)
            print(name, out[name]["digests"], file=sys.stderr)
    records = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    key = machine()
    fallback = f"{key.split('/')[0]}/{key.split('/')[-1]}"
    if fallback in records and key not in records:
        print(f"this machine's vendor has a record ({fallback}); this one is kept beside it as {key}",
              file=sys.stderr)
    records[key] = out
    RECORD.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
