"""The training loop: tasks -> rollouts -> rewards -> advantages -> PPO update, with checkpoints and evaluation.

Features
- batched multi-turn rollouts, G per task from the same start state (groups), in this process or on Ray
  workers (``distributed.backend``, ``rollout/collect.py``), each episode seeded by itself;
- advantages by name: GRPO (mean-std or mean-only), RLOO, GiGPO (anchor-state step credit), PPO (a value head
  on the policy's own body, turn-level GAE); optional SELAUR reward shaping and instance filtering
  (``selfevolve/train/credit.py``);
- optional step attribution (AgentEvolver's self-attributing): steps judged GOOD/BAD by an LLM or an oracle,
  fused with the GRPO/RLOO outcome advantage (``selfevolve/rewards/attribution.py``);
- PPO-clip with clip-higher, dual clip, optional KL to the base model (adapter disabled, no second copy);
- held-out evaluation (greedy success, pass@k) at the start, every ``train.eval_every`` steps and at the end;
- checkpoints with adapter, optimizer, RNG states and task cursor; ``train.resume=true`` continues exactly;
- metrics to ``metrics.jsonl`` and TensorBoard, rollouts to ``trajectories.jsonl``, a live progress bar.

Usage from Python::

    from selfevolve import Trainer, load_config
    cfg = load_config(overrides=["model.name=tiny", "train.steps=5"])
    Trainer(cfg, env=MyEnv).train()
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch
import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from selfevolve.config import Config
from selfevolve.envs import make_env
from selfevolve.envs.base import TextEnv
from selfevolve.experience.guide import guide_metrics
from selfevolve.errors import SelfEvolveError
from selfevolve.experience.pool import FILE as POOL_FILE
from selfevolve.rollout.collect import make_rollouts
from selfevolve.rollout.runner import RolloutStats
from selfevolve.rollout.search import SearchSpec, search_rollouts
from selfevolve.rollout.dynamic_sampling import sample_with_spread
from selfevolve.tasks.source import make_task_source
from selfevolve.train.build import (CRITICS, build_policy, build_prompt, load_init_adapter,  # noqa: F401
                                    resolve_env)  # build_policy, build_prompt, resolve_env: re-exported
from selfevolve.train.checkpoint import NoCheckpoint, find_checkpoint, load_checkpoint, refusing, save_checkpoint
from selfevolve.train.credit import credit_batch, padded, select_groups, step_advantages
from selfevolve.train.evaluate import eval_env_options, evaluate
from selfevolve.train.metrics import MetricsLogger, rollout_metrics, truncate_jsonl
from selfevolve.train.run_folder import STEP_LOGS, check_out_dir, init_out_dir
from selfevolve.train.samples import build_rows
from selfevolve.train.self_ac import episode_values, self_ac_update
from selfevolve.train.signals import Terminated, stop_on_sigterm
from selfevolve.train.shadow import build_shadow_episode, check_shadow_attention, critic_prompt_ids, final_state_ids
from selfevolve.train.update import compute_values, ppo_update
from selfevolve.train.warm_start import expert_episodes, has_expert
from selfevolve.types import Trajectory
from selfevolve.view.record import returns_minus_values, trajectory_records

class Trainer:
    def __init__(self, cfg: Config, env: type[TextEnv] | None = None, console: Console | None = None, tasks=None):
        """``tasks``: the training-task source (``next``, ``update``, ``state_dict``, ...) instead of the one the
        config names (``selfevolve evolve`` trains each round on its task pool: ``evolve/pool.py``)."""
        self.env_cls = resolve_env(cfg, env)
        if env is not None:
            # The saved config names the environment actually trained on (the caller's config is not changed).
            cfg = cfg.model_copy(deep=True)
            cfg.env.name = getattr(env, "name", env.__name__)
        self.cfg = cfg
        self.console = console or Console(stderr=True)
        self.env_options = cfg.env.options()
        self.probe_env = make_env(self.env_cls, **self.env_options)  # validates options early
        make_env(self.env_cls, **eval_env_options(self.env_cls, self.env_options, cfg.eval.env))  # and eval's
        need = getattr(self.env_cls, "min_new_tokens", 0)
        if cfg.agent.max_new_tokens < need:
            self.console.print(f"[yellow]warning:[/] agent.max_new_tokens={cfg.agent.max_new_tokens} is too short for "
                               f"a tool call in env {escape(cfg.env.name)}; every reply will be cut off. Use "
                               f"agent.max_new_tokens=96 (at least {need}).")
        self.out_dir = Path(cfg.train.out_dir)
        check_out_dir(cfg, self.out_dir)  # before the slow model load, and without writing anything yet
        torch.manual_seed(cfg.seed)
        self.policy = build_policy(cfg, critic=cfg.algo.name in CRITICS)
        self.builder = build_prompt(cfg, self.policy, self.probe_env)
        self.search = SearchSpec.from_config(cfg)
        self.search_trees: list[dict] = []
        self.search_metrics: dict[str, float] = {}
        self.critic_prompt = None
        if cfg.algo.name == "self_ac":
            check_shadow_attention(self.policy)
            self.critic_prompt = critic_prompt_ids(self.policy.tokenizer, self.builder.eot_id(),
                                                   cfg.algo.self_ac.critic_prompt)
        self.optimizer = torch.optim.AdamW(
            self.policy.trainable_parameters(), lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay
        )
        self.tasks = tasks if tasks is not None else make_task_source(cfg, getattr(self.env_cls, "name",
                                                                                       self.env_cls.__name__))
        self.rng = random.Random(cfg.seed)
        self.generator = torch.Generator(device=self.policy.device).manual_seed(cfg.seed)
        self.step = 0
        self.resumed = False
        self.last_eval: dict[str, float] = {}
        self.seen: set[str] = set()  # digests of the task contents trained on (envs/holdout.py)
        self.extra_objective = None  # another loss term, run before each optimizer step (train/update.py's extra)
        init_out_dir(self.cfg, self.out_dir)
        if cfg.train.resume and find_checkpoint_or_none(self.out_dir):
            self._resume()
        else:
            load_init_adapter(cfg, self.policy)  # model.init_from, if set
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

        self.attributor = Attributor.build(cfg, self.policy, make_env(self.env_cls, **self.env_options),
                                           self.out_dir)
        self.experience = None  # SEER recall / self-navigating (selfevolve/experience/)
        if cfg.experience.enabled:
            from selfevolve.experience.guide import Experience

            self.experience = Experience.build(cfg, self.out_dir, self.policy, self.env_cls, self.env_options,
                                               cfg.env.name, resume_step=self.step if self.resumed else None,
                                               console=self.console)
            if getattr(self, "_experience_rng", None) is not None:
                self.experience.rng.setstate(self._experience_rng)  # the recall shuffles continue exactly
        # where sampled rollouts run: here or on Ray workers (distributed.backend; started on first use)
        self.rollouts = make_rollouts(cfg, self.env_cls, self.env_options, self.builder, self.experience,
                                      self.console)

    def _resume(self) -> None:
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
        self._experience_rng = rng.get("experience")
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
        """Trajectory-search rollouts (``rollout.search``): each task still yields ``algo.group_size`` kept
        trajectories, from group_size searches (or group_size / beams with ``search.keep=all``)."""
        spec = self.search
        rep = [t for t in tasks for _ in range(self.cfg.algo.group_size // spec.kept_per_search())]
        result = search_rollouts(
            self.policy, lambda: make_env(self.env_cls, **self.env_options), rep, self.builder, spec,
            max_turns=self.probe_env.max_turns, group_ids=[f"{self.step}:{t.id}" for t in rep],
            generator=self.generator, rng=self.rng,
            critic_suffix=self.critic_prompt if self.cfg.algo.name == "self_ac" else [],
        )
        self.search_trees = result.trees
        self.search_metrics = result.metrics()
        return result.trajectories, result.stats

    def train_step(self) -> dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        self.search_metrics: dict[str, float] = {}
        trajs, stats = self.collect()
        self.seen.update(t.task.content for t in trajs)
        judged = self.judge_outcomes(trajs)
        attributed = self.attribute(trajs)
        t1 = time.perf_counter()
        rows, credit_metrics = self.credit(trajs)
        upd = self.update(rows, trajs) if rows else {}
        if cfg.algo.name == "self_ac":
            self._record_values(trajs)
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
        rules = game_rules(make_env(self.env_cls, **self.env_options))
        return judge_outcomes(self.judge, trajs, r.source, retries=r.judge_retries, rules=rules)

    def attribute(self, trajs: list[Trajectory]) -> dict[str, float]:
        """reward.attribution: GOOD/BAD on every step (``Step.info["attribution"]``) during the first
        ``attribution.steps`` updates; the step counter decides, so a resumed run stops where it would have."""
        if self.attributor is None or not self.attributor.active(self.step):
            return {}
        return self.attributor(trajs, self.step + 1)

    def update(self, rows: list, trajs: list[Trajectory]) -> dict[str, float]:
        """The optimizer steps on this batch: PPO-clip over token rows, or Self-AC over shadow episodes."""
        cfg = self.cfg
        if self.experience is not None:  # self-navigating: guided rows' old log-probs and upper clip
            self.nav_metrics = self.experience.prepare_rows(self.policy, rows, cfg.algo.micro_batch_tokens)
        if cfg.algo.name == "self_ac":
            metrics = self_ac_update(self.policy, self.optimizer, rows, cfg.algo, self.rng)
            for ep in rows:  # the value function comes free: keep it with the episode (viewer, search)
                trajs[ep.traj_index].flags["values"] = [round(v, 5) for v in ep.values]
                trajs[ep.traj_index].flags["advantages"] = returns_minus_values(ep.rewards, ep.values, cfg.algo.gamma)
            return metrics
        return {**getattr(self, "nav_metrics", {}),
                **ppo_update(self.policy, self.optimizer, rows, cfg.algo, self.rng, vf_coef=cfg.algo.ppo.vf_coef,
                             vf_clip=cfg.algo.ppo.vf_clip, extra=self.extra_objective)}

    def _shadow_episode(self, traj: Trajectory, rewards: list[float] | None = None, traj_index: int = 0):
        """``traj`` as a Self-AC shadow-prompt episode (with the final state's critic prompt unless switched off)."""
        final = final_state_ids(traj, self.builder) if self.cfg.algo.self_ac.final_state else None
        return build_shadow_episode(traj, self.critic_prompt, final, rewards=rewards, traj_index=traj_index)

    def _record_values(self, trajs: list[Trajectory]) -> None:
        """V(s_0..s_n) on the trajectories the update did not see (dropped by filtering), without gradients, so
        that every logged trajectory carries its values."""
        todo = [t for t in trajs if "values" not in t.flags and t.steps]
        if not todo:
            return
        eps = [self._shadow_episode(t) for t in todo]
        for t, vals in zip(todo, episode_values(self.policy, eps, self.cfg.algo.micro_batch_tokens)):
            t.flags["values"] = [round(v, 5) for v in vals]

    def credit(self, trajs: list[Trajectory]):
        """Rewards -> filtering -> per-turn advantages -> training rows (see ``selfevolve/train/credit.py``).
        Self-AC's advantages need the values of the update's own forward: it gets shadow episodes instead."""
        cfg = self.cfg
        batch, metrics = credit_batch(trajs, cfg, self.policy.vocab_size)
        keep, filter_metrics = select_groups(batch, cfg.filter)
        metrics.update(filter_metrics)
        kept = [t for t, k in zip(trajs, keep.tolist()) if k]
        batch = batch.select(keep)
        if not kept:
            return [], metrics
        if cfg.algo.name == "self_ac":
            index = {id(t): i for i, t in enumerate(trajs)}
            episodes = [self._shadow_episode(t, rewards=r, traj_index=index[id(t)])
                        for t, r in zip(kept, batch.per_step(batch.step_rewards)) if t.steps]
            return episodes, metrics
        values = None
        if cfg.algo.name == "ppo":
            # V(s_t) of every turn under the current weights, before the update (the "old" values)
            probe = build_rows(kept, [0.0] * len(kept))
            per_turn = [[0.0] * len(t.steps) for t in kept]
            for row, vals in zip(probe, compute_values(self.policy, probe, cfg.algo.micro_batch_tokens)):
                for (i, t), v in zip(row.turns, vals):
                    per_turn[i][t] = v
            batch.values, _ = padded(per_turn)
            values = per_turn
        adv, returns = step_advantages(cfg.algo.name, batch, cfg.algo, cfg.attribution)
        for t, a in zip(kept, batch.per_step(adv)):  # kept with the episode for the viewer (train.log_trajectories)
            t.flags["advantages"] = [round(x, 5) for x in a]
        for t, v in zip(kept, values or []):
            t.flags["values"] = [round(x, 5) for x in v]
        rows = build_rows(kept, batch.per_step(adv),
                          returns=batch.per_step(returns) if returns is not None else None, values=values)
        return rows, metrics

    def evaluate(self, episodes: int | None = None, pass_k: int | None = None) -> dict[str, float]:
        e = self.cfg.eval
        return evaluate(
            self.policy, self.env_cls, eval_env_options(self.env_cls, self.env_options, e.env), self.builder,
            episodes=episodes or e.episodes, pass_k=e.pass_k if pass_k is None else pass_k,
            seed_offset=e.seed_offset, sample_seed=self.cfg.seed,
            experience=self.experience if e.experience == "on" else None, accumulate=e.accumulate, chunk=e.chunk,
            seen=self.seen,
        )

    # ---- the loop ---------------------------------------------------------------------------------------------
    def train(self) -> dict[str, float]:
        cfg = self.cfg
        logger = MetricsLogger(self.out_dir, purge_step=self.step + 1 if self.resumed else None)
        last: dict[str, float] = {}
        progress = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), TextColumn("{task.description}"),
            console=self.console, disable=not cfg.train.progress, transient=False,
        )
        try:
            with stop_on_sigterm(), progress:  # SIGTERM stops the run like Ctrl-C (train/signals.py)
                bar = progress.add_task("", total=cfg.train.steps, completed=self.step)
                if self.step == 0 and not self.resumed:
                    first: dict[str, float] = {}
                    if cfg.eval.at_start:
                        progress.update(bar, description="evaluating the untrained policy")
                        self.last_eval = self.evaluate()
                        first = dict(self.last_eval)
                    if cfg.train.warm_start_steps and has_expert(self.env_cls, self.env_options):
                        first.update(self.warm_start(logger, progress, bar))
                    logger.log(0, first)
                    self.save()
                while self.step < cfg.train.steps:
                    last = self.train_step()
                    if self._eval_due():
                        progress.update(bar, description="evaluating")
                        self.last_eval = self.evaluate()
                        last.update(self.last_eval)
                    logger.log(self.step, last)
                    if self.step % cfg.train.save_every == 0 or self.step == cfg.train.steps:
                        self.save()
                    progress.update(bar, completed=self.step, description=_live(last, self.last_eval))
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
        """Stop the rollout workers, if any (the Ray backend); the trainer stays usable (they restart)."""
        self.rollouts.close()

    def warm_start(self, logger: MetricsLogger, progress: Progress, bar) -> dict[str, float]:
        """Behaviour cloning on expert episodes (see ``selfevolve/train/warm_start.py``); returns its summary."""
        cfg = self.cfg
        n = cfg.train.warm_start_steps
        losses = []
        for k in range(n):
            progress.update(bar, description=f"warm start {k + 1}/{n} (imitating the expert)")
            tasks = self.tasks.stream.next(cfg.train.warm_start_tasks or cfg.train.tasks_per_step * cfg.algo.group_size)
            trajs = expert_episodes(self.env_cls, self.env_options, tasks, self.builder, self.policy.tokenizer)
            self.seen.update(t.task.content for t in trajs)
            rows = build_rows(trajs, [0.0] * len(trajs))
            st = ppo_update(self.policy, self.optimizer, rows, cfg.algo, self.rng, objective="nll")
            losses.append(st["loss/bc"])
            logger.scalar("warm/loss_bc", st["loss/bc"], k + 1)
        summary = {"warm/steps": n, "warm/loss_bc_first": losses[0], "warm/loss_bc_last": losses[-1]}
        if not cfg.eval.after_warm_start:
            return summary
        progress.update(bar, description="evaluating after the warm start")
        self.last_eval = self.evaluate()
        return summary | {f"warm/{k.removeprefix('eval/')}": v for k, v in self.last_eval.items()}

    def _eval_due(self) -> bool:
        every = self.cfg.train.eval_every
        return self.step == self.cfg.train.steps or (every > 0 and self.step % every == 0)


def _live(m: dict[str, float], ev: dict[str, float]) -> str:
    parts = [
        f"reward {m.get('reward/mean', 0):.3f}",
        f"success {m.get('success/rate', 0):.2f}",
        f"valid {m.get('valid/rate', 0):.2f}",
    ]
    if "eval/success" in ev:
        parts.append(f"eval {ev['eval/success']:.2f}")
    parts.append(f"{m.get('tokens_per_s', 0):.0f} tok/s")
    return " · ".join(parts)


def find_checkpoint_or_none(out_dir: Path):
    """The run's checkpoint to resume, None when it has none; a checkpoint that cannot be resumed (corrupt, or
    pickled by an old version) is an error, never a silent fresh start over the old run."""
    try:
        return find_checkpoint(out_dir)
    except NoCheckpoint:
        return None
