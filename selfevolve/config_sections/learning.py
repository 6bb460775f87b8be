"""The sections of what a step learns from its rollouts: ``algo`` (the estimator, its ``gigpo``, ``ppo`` and
``self_ac`` settings, the optimizer and the clip), ``reward`` (SELAUR shaping, the judge), ``attribution``,
``filter`` and ``sampling`` (which tasks a step trains on)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from selfevolve.config_sections.base import _Section


class GigpoConfig(_Section):
    omega: float = Field(1.0, ge=0, description="Weight ω of the step-level advantage (A = A_episode + ω·A_step).")
    anchor: Literal["state", "observation", "similarity"] = Field(
        "state",
        description="Anchor-state key: the env's state_key() (falls back to the observation text when empty), "
        "the observation text, or observation texts merged by difflib similarity.",
    )
    similarity: float = Field(0.95, gt=0, le=1, description="Threshold of anchor=similarity.")
    weighting: Literal["trajectory", "step"] = Field(
        "trajectory",
        description="Anchor statistics per trajectory (a trajectory that revisits a state weighs once) or per "
        "step sample (verl-agent).",
    )


class PpoConfig(_Section):
    lam: float = Field(0.95, ge=0, le=1, description="GAE λ (turn level).")
    vf_coef: float = Field(0.5, ge=0, description="Weight of the value loss.")
    vf_clip: float | None = Field(0.2, gt=0, description="Value clipping ε around the rollout-time value; null: off.")
    value_head: Literal["linear", "mlp"] = Field("linear", description="Critic head on the policy's own body.")
    whiten: bool = Field(True, description="Normalise the batch's turn advantages to mean 0, std 1.")


class SelfAcConfig(_Section):
    alpha: float = Field(0.5, ge=0, le=1, description="α: loss = α·critic + (1 − α)·actor.")
    td_max: int = Field(5, ge=1, le=32, description="The critic loss averages the TD(1)..TD(td_max) errors.")
    ratio: Literal["token", "turn"] = Field(
        "token", description="PPO ratio per action token (turn advantage broadcast) or per turn (the whole "
        "action's probability, as in the seed).")
    critic_prompt: str = Field(
        "Critic Mode! Evaluate the current state with a single expressive word:",
        min_length=1, description="The critic prompt's system message (the actor never sees it).")
    final_state: bool = Field(True, description="Also read V after the last observation (n + 1 critic prompts; "
                              "its target is the terminal value 0).")
    forward: Literal["shadow", "per_turn"] = Field(
        "shadow", description="shadow: one forward per episode (the shadow prompt); per_turn: the reference "
        "computation with one critic forward per state (same losses, slower).")
    value_head: Literal["linear", "mlp"] = Field("linear", description="Critic head on the policy's own body.")


class AlgoConfig(_Section):
    name: Literal["grpo", "rloo", "gigpo", "ppo", "self_ac"] = Field(
        "grpo", description="Advantage estimator: grpo, rloo (episode level), gigpo (episode + anchor-state step "
        "level), ppo (value head on the policy's body + turn-level GAE), self_ac (value head read after a "
        "critic prompt, TD(1..n) critic, actor and critic in one forward per episode).")
    norm: Literal["mean_std", "mean"] = Field(
        "mean_std", description="GRPO/GiGPO normalisation: divide by the group std (mean_std) or not (mean).")
    gamma: float = Field(0.95, ge=0, le=1, description="Turn discount γ of GiGPO step returns, PPO's GAE and Self-AC's "
                       "returns and TD targets.")
    gigpo: GigpoConfig = Field(default_factory=GigpoConfig)
    ppo: PpoConfig = Field(default_factory=PpoConfig)
    self_ac: SelfAcConfig = Field(default_factory=SelfAcConfig)
    group_size: int = Field(8, ge=1, description="G: rollouts per task from the same start state.")
    # AdamW moves each weight by about lr per step: above 1 one step wipes out the adapter (and above 3.4e38 the
    # optimizer cannot even convert lr to float32)
    lr: float = Field(2e-4, gt=0, le=1, description="AdamW learning rate of the LoRA parameters.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    epochs: int = Field(1, ge=1, description="PPO epochs over each batch of rollouts.")
    minibatches: int = Field(1, ge=1, description="Optimizer steps per epoch (the batch is split evenly).")
    micro_batch_tokens: int = Field(
        4096,
        ge=64,
        description="Tokens per forward/backward chunk (gradient accumulation); bounds memory. The update counts "
        "what its tree of turns encodes (unpadded, in one packed forward) plus 1/16 per key/value position it "
        "keeps; forwards of rows without a shared prefix count padded tokens. An episode longer than this is one "
        "chunk on its own (a sequence is never split).",
    )
    micro_batch_gb: float | None = Field(
        3.0,
        gt=0,
        description="Memory a micro-batch's activations may take in a training forward and backward, in GB "
        "(estimated from the model's sizes: objectives/memory.py); it lowers micro_batch_tokens for large models "
        "(SmolLM2-135M in fp32: 1,914 tokens at 3.0). "
        "null: micro_batch_tokens alone.",
    )
    # the ratio is clipped below at 1 - clip_low: at 1 or more that bound is 0 or negative, which a ratio never is
    clip_low: float = Field(0.2, ge=0, lt=1, description="PPO ratio lower clip epsilon (the ratio's floor is "
                            "1 - clip_low, so below 1).")
    clip_high: float = Field(0.28, ge=0, description="PPO ratio upper clip epsilon (clip-higher).")
    # dual clip bounds the loss of A < 0 at c·|A|, above the clipped surrogate's (1 + clip_high)·|A| only for c > 1
    dual_clip: float | None = Field(3.0, gt=1, description="Dual-clip constant c > 1 for A<0; null disables.")
    old_logprobs: Literal["auto", "sampled", "recompute"] = Field(
        "auto", description="π_old of the PPO ratio: the log-probs the sampler recorded (sampled) or the trainer's "
        "own forward at the weights that sampled (recompute: with one optimizer step per batch, the update's "
        "forward itself, detached, at no extra cost). auto: recompute where the model computes in bf16/fp16, whose "
        "sampler and trainer round differently (|approx_kl| 0.0027 per token on average at the weights that "
        "sampled, measured in bf16); sampled in fp32, where they agree to ~1e-7. Guided rows keep theirs "
        "(experience.old_logprobs). objectives/old_logprobs.py.")
    kl_coef: float = Field(0.0, ge=0, description="KL penalty to the reference (base model, adapter off).")
    kl_kind: Literal["kl", "abs", "mse", "low_var_kl"] = Field("low_var_kl", description="KL estimator.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")


class SelaurConfig(_Section):
    fail_weight: float = Field(0.95, gt=0, lt=1, description="w: failed steps get w·(uncertainty share).")
    lam: float = Field(0.9, gt=0, le=1, description="λ of the trajectory aggregate (late steps weigh more).")
    w_entropy: float = Field(1 / 3, ge=0, description="Weight of normalised entropy (0 switches it off).")
    w_least_confidence: float = Field(1 / 3, ge=0, description="Weight of least confidence (0: off).")
    w_margin: float = Field(1 / 3, ge=0, description="Weight of the margin term (0: off).")
    margin_scale: float = Field(1.0, gt=0, description="Sigmoid scale s of the margin term.")
    least_confidence: Literal["top1", "sampled"] = Field(
        "top1", description="1 − p of the most likely token (top1) or of the sampled token (sampled).")
    gap: float = Field(1.0, gt=0, description="Width of the failure band below the lowest success reward.")
    success_reward: float = Field(1.0, description="The band's top when a batch has no success.")

    @model_validator(mode="after")
    def _some_metric(self):
        if self.w_entropy + self.w_least_confidence + self.w_margin <= 0:
            raise ValueError("reward.selaur: at least one of w_entropy, w_least_confidence, w_margin must be > 0")
        return self


class RewardConfig(_Section):
    shaping: Literal["none", "selaur"] = Field(
        "none", description="Reward shaping: selaur gives failed trajectories uncertainty rewards.")
    selaur: SelaurConfig = Field(default_factory=SelaurConfig)
    source: Literal["verifier", "judge", "both"] = Field(
        "verifier", description="Outcome reward: the environment's (verifier), an LLM judge's score in [0, 1] "
        "against the task's reference (judge; step rewards replaced), or the environment's with the judge run "
        "beside it to measure their agreement (both). See docs/questioning.md.")
    judge_llm: str = Field("policy", description="Model of the judge calls: policy, base, a local model path or "
                           "openai:MODEL (an OpenAI-compatible server, see llm_api).")
    judge_retries: int = Field(1, ge=0, description="Retries of a judgement without a readable score.")
    judge_max_new_tokens: int = Field(96, ge=8, description="Reply budget of a judge call.")
    attribution: Literal["none", "llm", "oracle"] = Field(
        "none", description="Step-level credit by attribution (AgentEvolver's self-attributing, docs/attribution.md): "
        "every step labelled GOOD or BAD by an LLM reading the whole trajectory and its outcome (llm) or by the "
        "environment's ground truth (oracle: frozenlake, sokoban, tool worlds), their suffix sums added to the "
        "estimator's advantage (every algo.name). Settings in the attribution section.")


class AttributionConfig(_Section):
    """``reward.attribution=llm|oracle``: AgentEvolver's attribution-driven credit (docs/attribution.md)."""

    alpha: float = Field(0.2, ge=0, description="α: weight of the z-scored step labels in the step reward "
                         "r̂_t = α·r̃_t + 1[t = T]·R̃ (AgentEvolver uses 0.1-0.2).")
    steps: int | None = Field(None, ge=0, description="Attribute the first N updates (AgentEvolver's prm_steps), "
                              "then train with the plain estimator; null: every update.")
    llm: str = Field("policy", description="Model of the judge calls (reward.attribution=llm): policy, base, a "
                     "local model path or openai:MODEL (see llm_api); calls go to RUN/llm_calls.jsonl.")
    tokens_per_step: int = Field(48, ge=8, description="Reply budget of a judgement per step of the trajectory "
                                 "(two short lines per step).")
    max_new_tokens: int = Field(512, ge=16, description="Largest reply budget of one judgement.")
    constrained: bool = Field(False, description="Decode a local judge's reply under its schema (constrained "
                              "decoding: 'Step i Analysis: ...' then 'Step i Judgment: GOOD|BAD' for every step, "
                              "nothing else), so every step gets a label read from the reply (docs/evolve.md).")


class FilterConfig(_Section):
    keep: float = Field(1.0, gt=0, le=1, description="Fraction of task groups kept per step, highest reward spread first (1: all).")
    by: Literal["std", "range"] = Field("std", description="Spread measure of a group's rewards.")
    drop_zero_std: bool = Field(False, description="Also drop every group whose rewards are all equal.")


class SamplingConfig(_Section):
    """Which tasks a step trains on (issue 39: every seed learns): dynamic sampling and learnability selection."""

    dynamic: bool = Field(False, description="DAPO's dynamic sampling: play new tasks until train.tasks_per_step "
                          "groups have rewards that differ (a group whose rollouts all scored the same has zero "
                          "advantage), up to sampling.max_rounds rounds; only those groups are trained on. The "
                          "extra rollouts are counted in sampling/* metrics and in the step's time.")
    max_rounds: int = Field(3, ge=1, le=20, description="Rounds of rollouts a step may play with sampling.dynamic.")
    tasks: Literal["stream", "learnability"] = Field(
        "stream", description="stream: each step takes the next training seeds; learnability: tasks drawn with "
        "weight p(1-p) + sampling.floor from the tasks already played (p: their estimated success rate) and "
        "fresh ones (at the prior), so that tasks always or never solved stop taking the batch.")
    prior: float = Field(0.5, gt=0, lt=1, description="learnability: the success rate assumed for a new task.")
    prior_weight: float = Field(2.0, gt=0, description="learnability: how many attempts the prior counts as.")
    floor: float = Field(0.05, ge=0, le=1, description="learnability: weight added to every task's p(1-p).")
