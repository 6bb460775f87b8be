"""The training loop: tasks -> rollouts -> rewards -> advantages -> PPO update, with checkpoints and evaluation.

Features
- batched multi-turn rollouts, G per task from the same start state (groups), in this process or on Ray
  workers (``distributed.backend``, ``rollout/collect.py``), each episode seeded by itself;
- the algorithm as an objective picked by ``algo.name`` (``selfevolve/objectives/``): GRPO (mean-std or
  mean-only), RLOO, GiGPO (anchor-state step credit), PPO (a value head on the policy's own body, turn-level
  GAE), Self-AC (actor and critic from one shadow-prompt forward); optional SELAUR reward shaping and instance
  filtering;
- optional step attribution (AgentEvolver's self-attributing): steps judged GOOD/BAD by an LLM or an oracle,
  their suffix sums added to the estimator's advantage (``selfevolve/rewards/attribution.py``);
- PPO-clip with clip-higher, dual clip, optional KL to the base model (adapter disabled, no second copy);
- held-out evaluation (greedy success, pass@k) at the start, every ``train.eval_every`` steps and at the end;
- checkpoints with adapter, optimizer, RNG states and task cursor; ``train.resume=true`` continues exactly;
- metrics to ``metrics.jsonl`` and TensorBoard, rollouts to ``trajectories.jsonl``, every evaluation's episodes to
  ``eval_trajectories.jsonl``; progress as a live bar on a terminal, plain lines elsewhere (``train/progress.py``).

Usage from Python::

    from selfevolve import Trainer, load_config
    cfg = load_config(overrides=["model.name=tiny", "train.steps=5"])
    Trainer(cfg, env=MyEnv).train()
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from pathlib import Path

import torch
import yaml
from rich.console import Console
from rich.markup import escape

from selfevolve.build import build_policy, build_prompt, resolve_env, resolve_products  # noqa: F401 - re-exported
from selfevolve.config import Config
from selfevolve.distributed import make_rollouts
from selfevolve.envs import make_env
from selfevolve.envs.base import TextEnv
from selfevolve.envs.pool import EnvPool, close_all
from selfevolve.errors import SelfEvolveError
from selfevolve.experience.guide import guide_metrics
from selfevolve.experience.pool import FILE as POOL_FILE
from selfevolve.objectives import make_objective, value_head_kind
from selfevolve.objectives.update import NonFinite
from selfevolve.rollout.dynamic_sampling import sample_with_spread
from selfevolve.rollout.runner import RolloutStats
from selfevolve.rollout.search import SearchSpec
from selfevolve.tasks.source import make_task_source
from selfevolve.train.checkpoint import (NoCheckpoint, find_checkpoint, load_checkpoint, load_init_adapter, refusing,
                                        remove_partial_writes, save_checkpoint)
from selfevolve.train.evaluate import eval_env_options, evaluate
from selfevolve.train.metrics import MetricsLogger, peak_rss_gb, rollout_metrics, truncate_jsonl
from selfevolve.train.progress import Progress, make_progress
from selfevolve.train.run_folder import STEP_LOGS, check_out_dir, init_out_dir, resumed_config
from selfevolve.train.signals import Terminated, stop_on_sigterm
from selfevolve.train.warm_start import clone_step, expert_episodes, has_expert
from selfevolve.types import Trajectory
from selfevolve.view.record import EVAL_LOG, eval_records, trajectory_records

class Trainer:
    def __init__(self, cfg: Config, env: type[TextEnv] | None = None, console: Console | None = None, tasks=None):
        """``tasks``: the training-task source (``next``, ``update``, ``state_dict``, ...) instead of the one the
        config names (``selfevolve evolve`` trains each round on its task pool: ``evolve/pool.py``)."""
        self.env_cls = resolve_env(cfg, env)
        self.console = console or Console(stderr=True)
        # model.matmul_dtype=auto chosen here (this CPU, or the resumed run's choice): config.yaml records it
        saved = resumed_config(cfg, Path(cfg.train.out_dir))
        cfg = resolve_products(cfg, saved, self.console)
        if env is not None:
            # The saved config names the environment actually trained on (the caller's config is not changed).
            cfg = cfg.model_copy(deep=True)
            cfg.env.name = getattr(env, "name", env.__name__)
        self.cfg = cfg
        self.env_options = cfg.env.options()
        self.probe_env = make_env(self.env_cls, **self.env_options)  # validates options early (plays nothing)
        make_env(self.env_cls, **eval_env_options(self.env_cls, self.env_options, cfg.eval.env)).close()  # and eval's
        self.env_pool = EnvPool(self.env_cls, self.env_options)  # the episodes' environments, reused every step
        need = getattr(self.env_cls, "min_new_tokens", 0)
        if cfg.agent.max_new_tokens < need:
            self.console.print(f"[yellow]warning:[/] agent.max_new_tokens={cfg.agent.max_new_tokens} is too short for "
                               f"a tool call in env {escape(cfg.env.name)}; every reply will be cut off. Use "
                               f"agent.max_new_tokens=96 (at least {need}).")
        self.out_dir = Path(cfg.train.out_dir)
        check_out_dir(cfg, self.out_dir, saved)  # before the slow model load, and without writing anything yet
        torch.manual_seed(cfg.seed)
        self.policy = build_policy(cfg, value_head=value_head_kind(cfg))
        self.builder = build_prompt(cfg, self.policy, self.probe_env)
        self.search = SearchSpec.from_config(cfg)
        self.search_trees: list[dict] = []  # the last step's search trees (rollout.search), for the log
        self.search_metrics: dict[str, float] = {}
        self.optimizer = torch.optim.AdamW(
            self.policy.trainable_parameters(), lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay
        )
        self.tasks = tasks if tasks is not None else make_task_source(cfg, getattr(self.env_cls, "name",
                                                                                       self.env_cls.__name__))
        self.rng = random.Random(cfg.seed)
        # the algorithm, picked by name once: credit and update (selfevolve/objectives/)
        self.objective = make_objective(cfg, self.policy, self.builder, self.optimizer, self.rng)
        self.generator = self.policy.stream(cfg.seed)  # search's random stream (per-episode streams for sampling)
        self.step = 0
        self.resumed = False
        self.last_eval: dict[str, float] = {}
        self.seen: set[str] = set()  # digests of the task contents trained on (envs/holdout.py)
        init_out_dir(self.cfg, self.out_dir)
        experience_rng = None  # the recall's shuffle state of a resumed run
        if cfg.train.resume and find_checkpoint_or_none(self.out_dir):
            experience_rng = self._resume()
        else:
            load_init_adapter(cfg, self.policy, self.optimizer)  # model.init_from (and init_optimizer), if set
        if cfg.train.resume and not self.resumed:
            # nothing to resume from: start clean, without a stale log (or pool) of an earlier attempt
            for name in (*STEP_LOGS, POOL_FILE):
                (self.out_dir / name).unlink(missing_ok=True)
        self.judge = None  # reward.source=judge|both: an LLM judge scores every episode (rewards/judge.py)
        if cfg.reward.source != "verifier":
            from selfevolve.models.llm import LLM

            self.judge = LLM(cfg.reward.judge_llm, self.policy, log_dir=self.out_dir,
                             max_new_tokens=cfg.reward.judge_max_new_tokens, dtype=cfg.model.dtype, seed=cfg.seed,
                             api=cfg.llm_api)
        # reward.attribution=llm|oracle: every step labelled GOOD/BAD for the credit (rewards/attribution.py)
        from selfevolve.rewards.attribution import Attributor

        self.attributor_env = make_env(self.env_cls, **self.env_options)  # the oracle's own (it replays)
        self.attributor = Attributor.build(cfg, self.policy, self.attributor_env, self.out_dir)
        self.experience = None  # SEER recall / self-navigating (selfevolve/experience/)
        if cfg.experience.enabled:
            from selfevolve.experience.guide import Experience

            self.experience = Experience.build(cfg, self.out_dir, self.policy, self.env_cls, self.env_options,
                                               cfg.env.name, resume_step=self.step if self.resumed else None,
                                               console=self.console)
            if experience_rng is not None:
                self.experience.rng.setstate(experience_rng)  # the recall shuffles continue exactly
        # where sampled rollouts run: here or on Ray workers (distributed.backend; started on first use)
        self.rollouts = make_rollouts(cfg, self.env_cls, self.env_options, self.builder, self.experience,
                                      self.console, pool=self.env_pool)

    def _resume(self):
        """Restore the run from its latest checkpoint; returns the experience recall's RNG state (None if none:
        the pool is built after this)."""
        remove_partial_writes(self.out_dir)  # a write killed half-way (kill -9) left a .tmp-* folder behind
        ckpt = find_checkpoint(self.out_dir)
        data = load_checkpoint(ckpt)  # checked files, nothing unpickled (train/checkpoint.py)
        with refusing(ckpt / "adapter.safetensors"):
            self.policy.load_adapter_state(data["adapter"])
        with refusing(ckpt / "optimizer.safetensors"):
            self.optimizer.load_state_dict(data["optimizer"])
        st = data["state"]
        self.step = st["step"]
        self.tasks.cursor = st.get("task_cursor", 0)
        self.last_eval = st.get("last_eval", {})
        self.seen = set(st.get("seen", []))
        self.tasks.load_state_dict(st.get("tasks", {}))
        rng = data["rng"]
        self.rng.setstate(rng["python"])
        with refusing(ckpt / "rng.json"):
            torch.set_rng_state(rng["torch"])
        try:
            self.generator.set_state(rng["sampler"])
        except (RuntimeError, TypeError, ValueError) as e:
            raise SelfEvolveError(f"cannot resume {self.out_dir} on this device ({e}); resume on the kind of "
                                  f"device the run started on") from None
        for name in STEP_LOGS:
            truncate_jsonl(self.out_dir / name, self.step)
        self.resumed = True
        self.console.print(f"[bold]resuming[/] {escape(str(self.out_dir))} from step {self.step} ({ckpt.name})")
        return rng.get("experience")

    def save(self) -> Path:
        return save_checkpoint(
            self.out_dir,
            self.step,
            adapter=self.policy.adapter_state(),
            optimizer=self.optimizer,
            state={"task_cursor": self.tasks.cursor, "last_eval": self.last_eval, "seen": sorted(self.seen),
                   "tasks": self.tasks.state_dict()},
            rng={"python": self.rng.getstate(), "torch": torch.get_rng_state(), "sampler": self.generator.get_state(),
                 **({"experience": self.experience.rng.getstate()} if self.experience is not None else {})},
            config_yaml=yaml.safe_dump(self.cfg.model_dump(mode="json"), sort_keys=False),
            policy=self.policy,
        )

    # ---- one step ---------------------------------------------------------------------------------------------
    def collect(self) -> tuple[list[Trajectory], RolloutStats]:
        """The step's rollouts: search here, sampling through the configured backend (rollout/collect.py); with
        ``sampling.dynamic``, rounds of them until the step has its groups with a reward spread."""
        n, s = self.cfg.train.tasks_per_step, self.cfg.sampling
        if not s.dynamic:
            trajs, stats = self._play(self.tasks.next(n))
        else:
            trajs, rounds, metrics = sample_with_spread(self.tasks.next, self._play, n, s.max_rounds)
            stats = RolloutStats(*(sum(getattr(r, f) for r in rounds)
                                   for f in ("seconds", "prompt_tokens", "new_tokens", "generate_calls")))
            self.search_metrics.update(metrics)
        self.search_metrics.update(self.tasks.metrics())
        return trajs, stats

    def _play(self, tasks) -> tuple[list[Trajectory], RolloutStats]:
        if self.search.name != "sample":
            trajs, stats = self._search(tasks)
        else:
            trajs, stats, metrics = self.rollouts.collect(self.policy, tasks, self.step)
            self.search_metrics.update(metrics)
        self.tasks.update(trajs)  # what each task's rollouts achieved (sampling.tasks=learnability draws by it)
        return trajs, stats

    def _search(self, tasks) -> tuple[list[Trajectory], RolloutStats]:
        """Trajectory-search rollouts (``rollout.search``) through the configured backend (rollout/collect.py):
        each task still yields ``algo.group_size`` kept trajectories."""
        result, metrics = self.rollouts.search(
            self.policy, tasks, self.step, self.search, max_turns=self.probe_env.max_turns,
            generator=self.generator, rng=self.rng, critic_suffix=self.objective.value_suffix,
        )
        self.search_trees = result.trees
        self.search_metrics = {**result.metrics(), **metrics}
        return result.trajectories, result.stats

    def train_step(self) -> dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        self.search_metrics = {}
        trajs, stats = self.collect()
        self.seen.update(t.task.content for t in trajs)
        judged = self.judge_outcomes(trajs)
        attributed = self.attribute(trajs)
        t1 = time.perf_counter()
        rows, credit_metrics = self.objective.credit(trajs)
        with self._stop_if_not_finite(f"step {self.step + 1}"):
            upd = self.update(rows, trajs)
        self.step += 1
        experience = {}
        if self.experience is not None:  # rows it adds belong to this step (a resume before its save drops them)
            experience = {**guide_metrics(trajs), **self.experience.learn(trajs, self.step)}
        t2 = time.perf_counter()
        metrics = {
            **experience,
            **judged,
            **attributed,
            **rollout_metrics(trajs),
            **credit_metrics,
            **self.search_metrics,
            **upd,
            "time/rollout": t1 - t0,
            "time/update": t2 - t1,
            "tokens_per_s": stats.tokens_per_s,
        }
        if cfg.train.log_trajectories:
            # with the viewer's fields: prompt text, reply tokens and their statistics (selfevolve/view/record.py)
            records = trajectory_records(trajs, self.step, self.policy, self.builder, cfg)
            with (self.out_dir / "trajectories.jsonl").open("a") as f:
                for rec in records:
                    f.write(json.dumps(rec) + "\n")
            if self.search_trees:
                with (self.out_dir / "search_trees.jsonl").open("a") as f:
                    for tree in self.search_trees:
                        f.write(json.dumps({"step": self.step, **tree}) + "\n")
        return metrics

    def judge_outcomes(self, trajs: list[Trajectory]) -> dict[str, float]:
        """reward.source=judge: the judge's score becomes each episode's outcome; both: it is only measured."""
        if self.judge is None:
            return {}
        from selfevolve.rewards.judge import game_rules, judge_outcomes

        self.judge.step = self.step + 1  # the calls belong to the step being made (resume truncates by it)
        r = self.cfg.reward
        rules = game_rules(self.probe_env)
        return judge_outcomes(self.judge, trajs, r.source, retries=r.judge_retries, rules=rules)

    def attribute(self, trajs: list[Trajectory]) -> dict[str, float]:
        """reward.attribution: GOOD/BAD on every step (``Step.info["attribution"]``) during the first
        ``attribution.steps`` updates; the step counter decides, so a resumed run stops where it would have."""
        if self.attributor is None or not self.attributor.active(self.step):
            return {}
        return self.attributor(trajs, self.step + 1)

    def update(self, rows: list, trajs: list[Trajectory]) -> dict[str, float]:
        """The objective's optimizer steps on this batch; self-navigating first restates the old log-probs and
        upper clip of its guided rows."""
        prepared = {}
        # the whole update in its precision (model.matmul_dtype=bf16_update): the guided rows' restated pi_old
        # and the critic's old values too, and Self-AC's update, which does not go through ppo_update
        with self.policy.updating():
            if self.experience is not None and rows:
                prepared = self.experience.prepare_rows(rows, self.objective.current_logprobs)
            return {**prepared, **self.objective.update(rows, trajs)}

    def evaluate(self, episodes: int | None = None, pass_k: int | None = None, label: str | None = None
                 ) -> dict[str, float]:
        """Held-out evaluation; with a ``label`` (and ``train.log_trajectories``) its greedy episodes are
        appended to ``eval_trajectories.jsonl`` for the viewer."""
        e = self.cfg.eval
        episodes_out = [] if label is not None and self.cfg.train.log_trajectories else None
        result = evaluate(
            self.policy, self.env_cls, eval_env_options(self.env_cls, self.env_options, e.env), self.builder,
            episodes=episodes or e.episodes, pass_k=e.pass_k if pass_k is None else pass_k,
            seed_offset=e.seed_offset, sample_seed=self.cfg.seed,
            experience=self.experience if e.experience == "on" else None, accumulate=e.accumulate, chunk=e.chunk,
            batch=e.batch, seen=self.seen, general=e.general, episodes_out=episodes_out, adapter_scale=e.adapter_scale,
        )
        if episodes_out:
            with (self.out_dir / EVAL_LOG).open("a") as f:
                for rec in eval_records(episodes_out, self.step, label, self.policy, self.builder, self.cfg,
                                        seen=self.seen):
                    f.write(json.dumps(rec) + "\n")
        return result

    def _evaluate_phase(self, label: str, progress: Progress) -> tuple[dict[str, float], float]:
        """An evaluation as a phase of the run: reported, its episodes logged; returns its metrics and seconds."""
        progress.evaluating(label)
        t0 = time.perf_counter()
        self.last_eval = self.evaluate(label=label)
        progress.evaluated(label, self.last_eval)
        return self.last_eval, time.perf_counter() - t0

    # ---- the loop ---------------------------------------------------------------------------------------------
    def train(self) -> dict[str, float]:
        cfg = self.cfg
        logger = MetricsLogger(self.out_dir, purge_step=self.step + 1 if self.resumed else None)
        last: dict[str, float] = {}
        progress = make_progress(self.console, cfg.train.progress, cfg.train.steps, self.step, cfg.eval.episodes)
        try:
            with stop_on_sigterm(), progress:  # SIGTERM stops the run like Ctrl-C (train/signals.py)
                if self.step == 0 and not self.resumed:
                    first: dict[str, float] = {}
                    if cfg.eval.at_start:
                        ev, seconds = self._evaluate_phase("start", progress)
                        first.update({**ev, "time/eval": seconds})
                    if cfg.train.warm_start_steps and has_expert(self.env_cls, self.env_options):
                        first.update(self.warm_start(logger, progress))
                    logger.log(0, {**first, "mem/peak_rss_gb": peak_rss_gb()})
                    self.save()
                progress.steps_begin(cfg.train.tasks_per_step, cfg.algo.group_size)
                while self.step < cfg.train.steps:
                    last = self.train_step()
                    evaluated = None
                    if self._eval_due():
                        label = "end" if self.step == cfg.train.steps else f"step {self.step}"
                        evaluated, seconds = self._evaluate_phase(label, progress)
                        last.update({**evaluated, "time/eval": seconds})
                    last["mem/peak_rss_gb"] = peak_rss_gb()
                    logger.log(self.step, last)
                    if self.step % cfg.train.save_every == 0 or self.step == cfg.train.steps:
                        self.save()
                    progress.step(self.step, last, evaluated)
        except KeyboardInterrupt as stop:
            how = "stopped by SIGTERM" if isinstance(stop, Terminated) else "interrupted"
            self.console.print(
                f"[yellow]{how} at step {self.step}.[/] The last checkpoint is intact; continue with "
                f"`selfevolve train {escape(str(self.out_dir / 'config.yaml'))} train.resume=true`."
            )
            raise
        finally:
            logger.close()
            self.close()
        return {**last, **self.last_eval}

    def close(self) -> None:
        """Stop the rollout workers, if any (the Ray backend), and close every environment made (their engines
        stop); the trainer stays usable (workers restart, environments are made again)."""
        self.rollouts.close()
        self.env_pool.close()
        close_all([self.probe_env, self.attributor_env])

    def warm_start(self, logger: MetricsLogger, progress: Progress) -> dict[str, float]:
        """Behaviour cloning on expert episodes (see ``selfevolve/train/warm_start.py``); returns its summary."""
        cfg = self.cfg
        n = cfg.train.warm_start_steps
        per_step = cfg.train.warm_start_tasks or cfg.train.tasks_per_step * cfg.algo.group_size
        losses = []
        progress.warm_begins(n, per_step)
        t0 = time.perf_counter()
        for k in range(n):
            t1 = time.perf_counter()
            tasks = self.tasks.stream.next(per_step)
            trajs = expert_episodes(self.env_cls, self.env_options, tasks, self.builder, self.policy.tokenizer)
            self.seen.update(t.task.content for t in trajs)
            with self._stop_if_not_finite(f"warm-start step {k + 1}"):
                st = clone_step(self.policy, self.optimizer, trajs, cfg.algo, self.rng,
                                cfg.train.warm_start_minibatches, lr=cfg.train.warm_start_lr)
            losses.append(st["loss/bc"])
            logger.warm_step(k + 1, st["loss/bc"], time.perf_counter() - t1)
            progress.warm(k + 1, n, st["loss/bc"])
        summary = {"warm/steps": n, "warm/loss_bc_first": losses[0], "warm/loss_bc_last": losses[-1],
                   "time/warm_start": time.perf_counter() - t0}
        if not cfg.eval.after_warm_start:
            return summary
        ev, seconds = self._evaluate_phase("after warm start", progress)
        warm = {f"warm/{k.removeprefix('eval/')}": v for k, v in ev.items()}
        return summary | warm | {"time/eval_warm_start": seconds}

    @contextlib.contextmanager
    def _stop_if_not_finite(self, where: str):
        """A NaN or infinite loss, gradient or weight stops the run with a message naming ``where``; nothing
        of it is saved, so the last checkpoint is the last good state."""
        try:
            yield
        except NonFinite as e:
            ckpt = find_checkpoint_or_none(self.out_dir)
            kept = f"the last checkpoint, {ckpt}, is the last good state" if ckpt else "no checkpoint was written"
            raise NonFinite(f"training stopped at {where}: {e}; {kept}") from None

    def _eval_due(self) -> bool:
        every = self.cfg.train.eval_every
        return self.step == self.cfg.train.steps or (every > 0 and self.step % every == 0)


def find_checkpoint_or_none(out_dir: Path):
    """The run's checkpoint to resume, None when it has none; a checkpoint that cannot be resumed (corrupt, or
    pickled by an old version) is an error, never a silent fresh start over the old run."""
    try:
        return find_checkpoint(out_dir)
    except NoCheckpoint:
        return None
