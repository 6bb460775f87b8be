"""The seeds' methods together against plain GRPO (issue 40): one FrozenLake run with trajectory search (TSR
beam search), SEER recall, self-attributing with the oracle's labels and SELAUR shaping, all on GRPO, against plain
GRPO on the same budget — the same warm start, seeds, tasks, number of updates and batch (tasks x kept
trajectories per update). The search spends more generation per kept trajectory: its compute multiple is
reported beside the result.

The combined arm trains on its prompts without the recalled examples (``experience.train_prompt=stripped``,
AgentEvolver's experience stripping applied to SEER's recall): trained as shown, every turn of every episode is
encoded whole with its ~1,600 tokens of examples, and on this CPU its first update did not finish in 24 minutes
(14 GB), where plain GRPO's take seconds.

Both methods are evaluated greedily on held-out FrozenLake maps, without experience (``eval.experience=off``):
what the policy itself learnt. The runner is ``bench_credit.py``'s (shared warm start, resumable runs, summary).

    OMP_NUM_THREADS=1 python benchmarks/bench_combined.py --seeds 0 1 2 --steps 2 --tasks-per-step 2 \\
        --group-size 8 --eval-every 0 --episodes 32 --workers 1     # the budget measured (docs/benchmarks.md)
    python benchmarks/bench_combined.py --model tiny --seeds 0 --steps 1 --episodes 2 --warm-steps 1 \\
        --tasks-per-step 1 --group-size 2 --out runs/bench_combined_smoke        # a smoke test (seconds)

A combined run's beam search over SEER-prompted nodes peaked at 15 GB of resident memory with SmolLM2 (two at once
overran a 23 GB machine) and took 4-10 minutes a step on one CPU thread: give it one worker per 16 GB.

Runs go to ``--out`` (default runs/bench_combined). Prints a markdown table and a final SUMMARY line.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_credit  # noqa: E402 - the shared runner

METHODS = {
    "grpo": ["algo.name=grpo"],
    "combined": ["algo.name=grpo", "rollout.search=beam", "experience.recall=seer", "reward.attribution=oracle",
                 "reward.shaping=selaur", "eval.experience=off", "experience.train_prompt=stripped"],
}

if __name__ == "__main__":
    bench_credit.main(METHODS, label="combined", description=__doc__.split("\n\n")[0], envs=["frozenlake"],
                      out=Path("runs/bench_combined"))
