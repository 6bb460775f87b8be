"""A run folder to serve or export, made in a second: the tiny model with a non-zero LoRA adapter (a fresh
adapter's B matrices are zero, which would make "the adapter is applied" untestable)."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from selfevolve.config import load_config
from selfevolve.train.checkpoint import save_checkpoint
from selfevolve.train.trainer import build_policy


def make_run(root: Path, seed: int = 0, scale: float = 0.5, overrides: tuple[str, ...] = ()):
    """``(run folder, policy)``: a checkpoint at step 1 whose adapter is random (std ``scale``)."""
    cfg = load_config(overrides=["model.name=tiny", "model.dtype=fp32", f"seed={seed}", f"train.out_dir={root}",
                                 *overrides])
    policy = build_policy(cfg)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
    save_checkpoint(root, 1, adapter=policy.adapter_state(), optimizer=None, state={"task_cursor": 0}, rng={},
                    config_yaml=yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return root, policy


NAME = "tiny-run"  # the model id the test servers serve


def serve_run(root: Path):
    """``(server, reference policy)``: a fresh run at ``root`` served on a free localhost port (started), and the
    same run loaded a second time, for computing expected replies without touching the served model."""
    from selfevolve.serve.app import Server, ServeOptions, bind, create_app, limits_for, load_served_run
    from selfevolve.train.run import load_run

    make_run(root)
    policy, _, _ = load_served_run(root)
    opts = ServeOptions(limits=limits_for(policy, max_tokens=64, max_prompt_tokens=1024), window=0.05)
    server = Server(create_app(policy, NAME, opts), bind("127.0.0.1", 0)).start()
    _, reference, _ = load_run(root)
    reference.temperature = 1.0  # greedy log-probs are reported at temperature 1
    return server, reference


def client(url: str):
    from openai import OpenAI

    return OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


def greedy(policy, prompt: list[int], budget: int):
    """``(ids, logprobs)`` of ``Policy.generate``'s greedy reply to one prompt."""
    gen = policy.generate([prompt], greedy=True, max_new_tokens=budget)
    return gen.ids[0], gen.logprobs[0]
