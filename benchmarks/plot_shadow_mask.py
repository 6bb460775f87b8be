"""Draw the Self-AC attention mask of a real two-turn episode (docs/img/shadow_mask.png).

The picture is the mask selfevolve builds (``selfevolve/objectives/self_ac/shadow.py``): the SmolLM2 chat
template, the real critic prompt, a short FrozenLake-like chat (no few-shot turns, so that the picture stays
readable).

    python benchmarks/plot_shadow_mask.py --out docs/img/shadow_mask.png
"""

from __future__ import annotations

import argparse

import torch

from selfevolve.agent.prompt import PromptBuilder
from selfevolve.models.loading import load_model
from selfevolve.objectives.self_ac.shadow import build_shadow_episode, critic_prompt_ids, final_state_ids, shadow_mask
from selfevolve.types import Step, Task, Trajectory


def episode():
    _, tok = load_model("tiny", "fp32")
    builder = PromptBuilder(tok, instructions="Reach G.", examples=[], few_shot=False)
    obs = ["S.\n.G", "_S\n.G", "_.\n.S"]
    actions = ["Right", "Down"]
    steps, prompt = [], builder.prompt_ids(obs[:1], [])
    for k, a in enumerate(actions):
        ids = list(tok.encode(a, add_special_tokens=False)) + [builder.eot_id()]
        steps.append(Step(prompt_ids=prompt, action_ids=ids, logprobs=[0.0] * len(ids), observation=obs[k + 1]))
        prompt = builder.extend(prompt, ids, obs[k + 1])
    traj = Trajectory(task=Task(id="0", env="x", seed=0), steps=steps)
    cp = critic_prompt_ids(tok, builder.eot_id())
    return build_shadow_episode(traj, cp, final_state_ids(traj, builder))


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/img/shadow_mask.png")
    args = ap.parse_args()
    ep = episode()
    one = lambda x: torch.tensor([x])
    mask = shadow_mask(one(ep.segment), one(ep.block), torch.ones(1, len(ep), dtype=torch.bool), torch.float32)
    allowed = (mask[0, 0] == 0).numpy()
    block = torch.tensor(ep.block)
    # 0 hidden, 1 real key seen, 2 critic-prompt key seen (only by its own critic prompt)
    img = allowed.astype(int) * (1 + (block[None, :] > 0).numpy().astype(int))
    fig, ax = plt.subplots(figsize=(7.5, 7.5))
    ax.imshow(img, cmap=ListedColormap(["white", "#4c72b0", "#dd8452"]), interpolation="nearest")
    # label the spans: the prompt, each critic prompt, each action, each observation
    spans, prev = [], 0
    for k, (s, e) in enumerate(zip(ep.cp_start, ep.cp_end)):
        spans.append((prev, s - 1, "prompt" if k == 0 else f"o{k - 1}"))
        spans.append((s, e, f"cp{k}"))
        if k < len(ep.a_start):
            spans.append((ep.a_start[k], ep.a_end[k], f"a{k}"))
            prev = ep.a_end[k] + 1
    ticks = [(s + e) / 2 for s, e, _ in spans]
    names = [n for _, _, n in spans]
    for s, _, _ in spans[1:]:
        ax.axhline(s - 0.5, color="grey", lw=0.4)
        ax.axvline(s - 0.5, color="grey", lw=0.4)
    ax.set_xticks(ticks, names, rotation=90, fontsize=8)
    ax.set_yticks(ticks, names, fontsize=8)
    ax.set_xlabel("key (attended-to token)")
    ax.set_ylabel("query (attending token)")
    ax.set_title(f"Self-AC shadow-prompt mask: 2 turns, 3 critic prompts, {len(ep)} tokens\n"
                 "blue: real token visible · orange: own critic prompt visible · white: hidden", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)
    print(f"SUMMARY wrote {args.out}: {len(ep)} tokens, critic prompts at {list(zip(ep.cp_start, ep.cp_end))}")


if __name__ == "__main__":
    main()
