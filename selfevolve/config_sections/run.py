"""The sections of a run: ``train`` (steps, the run folder, the warm start, logging), ``eval`` and
``distributed`` (where rollouts run)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from selfevolve.config_sections.base import _Section


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
    warm_start_minibatches: int = Field(
        4, ge=1, description="Optimizer steps per warm-start step: its expert episodes split evenly (1: one step "
        "on all of them, the default until 2026-11-27). 1.10x the warm start's time; on FrozenLake 4 took the warm "
        "start alone from 0/64 held out to 20-26/64 and the default run from 24 % to 42.5 % over 10 seeds "
        "(docs/benchmarks.md, 'The warm start's optimizer steps', 'Ten seeds of the new default').",
    )
    warm_start_lr: float | None = Field(
        None, gt=0, le=1, description="Learning rate of the warm start's cloning steps (null: algo.lr); the one "
        "optimizer is put back to algo.lr for RL and the checkpoints. Lets RL run at a lower algo.lr than the "
        "cloning; RL at 1e-4 after the default warm start ended seed 1 at 21/64 but took seed 0 from 43 to 8/64 "
        "(docs/benchmarks.md), so the default stays null. Not used by evolve's cloning (evolve.bc_*).",
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
                           "starts several runs from one already-evaluated adapter). selfevolve evolve's own is "
                           "evolve.start_eval, off by default.")
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
    batch: int = Field(32, ge=1, description="Without experience: episodes played at once (the generation cache "
                       "grows with them: 64 SmolLM2 FrozenLake episodes held 2.3 GB, 32 half that).")
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
