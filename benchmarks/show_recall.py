"""One real SEER recall, turn by turn: a greedy episode of the untrained model on a held-out tool-world task, and
at each turn the recalled pool items with their s1, s2, s3 and score (for docs/experience.md).

    python benchmarks/show_recall.py --world shop --task 0
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "2")

from selfevolve.agent.transcript import history_text  # noqa: E402
from selfevolve.config import load_config  # noqa: E402
from selfevolve.envs import ENVS, make_env  # noqa: E402
from selfevolve.experience.guide import Experience  # noqa: E402
from selfevolve.experience.recall import s1_similarity, s2_tool_coverage, s3_intent  # noqa: E402
from selfevolve.experience.records import tool_sequence  # noqa: E402
from selfevolve.rollout.runner import rollout  # noqa: E402
from selfevolve.tasks.source import seed_tasks  # noqa: E402
from selfevolve.train.trainer import build_policy, build_prompt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", default="shop")
    ap.add_argument("--task", type=int, default=0, help="index of the held-out task (eval seed offset + i)")
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    cfg = load_config(overrides=[f"model.name={args.model}", f"env.name={args.world}", "agent.max_new_tokens=64",
                                 "experience.recall=seer"])
    policy = build_policy(cfg)
    env_cls = ENVS[args.world]
    builder = build_prompt(cfg, policy, make_env(env_cls))
    with tempfile.TemporaryDirectory() as tmp:
        exp = Experience.build(cfg, tmp, policy, env_cls, {}, args.world)
        task = seed_tasks(args.world, args.task + 1, cfg.eval.seed_offset)[args.task]
        env = make_env(env_cls, split="test")
        traj = rollout(policy, [env], [task], builder, max_turns=env.max_turns, greedy=True,
                       guide=exp.guide([task], 1, training=False))[0]
        items = {it.id: it for it in exp.pool.items("trajectory")}
        vecs = dict(zip([it.id for it in exp.pool.items("trajectory")], exp.pool.matrix("trajectory")))
        query, intent = traj.query, traj.intent
        print(f"task: {query}\nclassified intent: {intent} (true: {traj.intent_true})\n")
        for t, step in enumerate(traj.steps):
            h = history_text(query, traj.steps[:t])
            e = exp.embedder.encode([h])[0]
            tools = tool_sequence(traj.steps[:t])
            print(f"turn {t + 1}: U_H = {tools}")
            for i in step.info.get("recalled", []):
                it = items[i]
                s1 = float(s1_similarity(vecs[i] @ e))
                s2, s3 = s2_tool_coverage(tools, it.tools), s3_intent(intent, it.intent)
                print(f"  #{i} {it.intent:14s} tools={it.tools} s1={s1:.3f} s2={s2:.2f} s3={s3:.0f} "
                      f"score={s1 + s2 + s3:.3f}")
            print(f"  reply: {step.action_text.strip()[:160]!r}\n  result: {step.observation[:120]!r}")
        print(f"success: {traj.success}")


if __name__ == "__main__":
    main()
