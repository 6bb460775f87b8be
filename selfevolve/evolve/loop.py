"""``selfevolve evolve``: an agent that improves from tasks it writes for itself, grounded in the environment.

Each round (``evolve.rounds``), in ``train.out_dir/round-R/``:

1. **explore** with the current policy on training sandboxes (``hindsight.explore_round``) → ``explorations.jsonl``;
2. **hindsight tasks**: what the explorations reached becomes tasks, verified by replaying their references,
   filtered, deduplicated against the pool (``hindsight.write_tasks``) → the pool grows (``pool.jsonl``,
   ``tasks.jsonl``);
3. **imitation and RL** (:class:`EvolveTrainer`, a :class:`~selfevolve.train.trainer.Trainer` run in
   ``round-R/train/`` that starts from the previous round's adapter): behaviour cloning on the pool's reference
   paths (``evolve.bc_steps``), then the round's share of ``train.steps`` RL updates (none before
   ``evolve.rl_from_round``, and none with ``evolve.rl=false``) on pool tasks drawn by learnability, each with
   the imitation term of replayed successes beside the RL loss;
4. **held-out evaluation** on the environment's own test split (the trainer's final evaluation) — then the next
   round explores with the improved policy.

Exploring and scoring the validation set (``evolve.keep=best``) train nothing, so they compute in the update's
precision (``evolve.acting_precision``: bf16 under ``model.matmul_dtype=bf16_update``); the RL rollouts and the
held-out evaluation keep the model's own. The starting policy is evaluated only with ``evolve.start_eval``: greedy,
it is the same figure whatever the seed (the base model's, without ``model.init_from``).

No human-written training task is reachable: the rounds' environments play only the pool (``split=synth``),
exploration and verification run the ordinary game on training instances with no goal given, the environment's
expert (``train.warm_start_steps``) is never called, and evaluation plays the test split. ``evolve.md`` states
what the run saw.

Every stage is resumable (``train.resume=true``): ``evolve.json`` records the stages done; a round's trainer
resumes from its own checkpoint, with the pool's counts and replay buffer as they were at that step.
"""

from __future__ import annotations

import contextlib
import gc
import json
import random
import time
from pathlib import Path

from rich.console import Console

from selfevolve.config import BEFORE_IT_EXISTED, Config, _validate
from selfevolve.envs import make_env
from selfevolve.errors import SelfEvolveError
from selfevolve.evolve import hindsight, report, validation
from selfevolve.evolve.imitation import ImitationTerm, buffer_rows, reference_episodes
from selfevolve.evolve.pool import PoolTasks, TaskPool
from selfevolve.questioning.explore import ExplorationRecord
from selfevolve.build import acting_only, build_policy, build_prompt, resolve_env, resolve_products
from selfevolve.train.evaluate import eval_env_options, evaluate
from selfevolve.train.run_folder import RUN_DEFINING, resume_differences, resume_hint
from selfevolve.train.trainer import Trainer
from selfevolve.train.warm_start import clone_step

STATE = "evolve.json"
COMPARED = (*RUN_DEFINING, "evolve", "questioning")  # what a resume must not change (plus train.steps)


def share(total: int, rounds: int, r: int) -> int:
    """Round ``r``'s share of ``total`` spread evenly over ``rounds`` (the later rounds get the remainder)."""
    return total * (r + 1) // rounds - total * r // rounds


def rl_steps(total: int, rounds: int, first: int, r: int) -> int:
    """Round ``r``'s RL updates: ``total`` spread evenly over rounds ``first``.. (``evolve.rl_from_round``); the
    rounds before ``first`` only clone."""
    return share(total, rounds - first, r - first) if r >= first else 0


def pool_seeds(probe, pool: TaskPool) -> list[int]:
    """The environment seed that starts each pool task, in pool order, for a ``probe`` environment playing the
    pool's tasks file (``split=synth``): a game plays task ``seed % n``, a tool world a fixed shuffle of them."""
    from selfevolve.envs.games.game_tasks import task_for

    pick = getattr(probe, "task_for", None)
    if not callable(pick) or hasattr(probe, "synth_tasks"):
        pick = lambda s: task_for(probe.synth_tasks, probe.ordinary, s)  # noqa: E731
    index = {e.task.id: i for i, e in enumerate(pool.entries)}
    seeds = [0] * len(pool)
    for s in range(len(pool)):
        seeds[index[pick(s).id]] = s
    return seeds


def as_saved(cfg: Config, saved: dict | None, console=None) -> Config:
    """``cfg`` resuming the run whose settings are ``saved`` (None: a new run): an evolve setting the run was saved
    without ran as ``config.BEFORE_IT_EXISTED`` says (``evolve.acting_precision``: the model's own precision), and
    goes on so, with a line on ``console`` where that is not what ``cfg`` asks."""
    had = (saved or {}).get("evolve") or {}
    older = {k: v for k, v in BEFORE_IT_EXISTED["evolve"].items() if saved is not None and k not in had}
    for key, value in older.items():
        if console is not None and getattr(cfg.evolve, key) != value:
            console.print(f"evolve.{key}={value}: the run resumed was begun before the setting existed and ran so")
    return cfg.model_copy(update={"evolve": cfg.evolve.model_copy(update=older)}) if older else cfg


class EvolveTrainer(Trainer):
    """One round's trainer: the pool's tasks (``tasks``: a :class:`PoolTasks`), behaviour cloning on their
    references (:meth:`clone_references`), and the imitation term beside every RL update."""

    def __init__(self, cfg: Config, tasks: PoolTasks, env=None, console=None):
        super().__init__(cfg, env=env, console=console, tasks=tasks)
        ev = cfg.evolve
        self.imitation = None
        if ev.imitation_weight > 0 and hasattr(self.objective, "extra"):  # an objective that takes a term beside its loss
            self.imitation = ImitationTerm(self.policy, ev.imitation_weight, ev.imitation_clip, ev.imitation_rows,
                                           cfg.algo.micro_batch_tokens)

    def update(self, rows, trajs):
        if self.imitation is not None:
            steps = self.cfg.algo.epochs * self.cfg.algo.minibatches
            n = self.imitation.prepare(self.tasks.pool, self.tasks.draws, self.tasks.rng, steps)
            self.objective.extra = self.imitation if n else None  # beside the RL loss (objectives/token.py)
        return super().update(rows, trajs)

    def clone_references(self, steps: int, per_step: int, seed: int) -> dict[str, float]:
        """Behaviour cloning on the references of pool tasks (``per_step`` drawn by learnability each step among
        the longest ``evolve.bc_longest`` of the pool): maximum likelihood, as the warm start does on the
        expert's episodes."""
        if steps <= 0:
            return {}
        pool, rng = self.tasks.pool, random.Random(f"evolve-bc-{seed}")
        t0 = time.perf_counter()
        among = pool.longest(self.cfg.evolve.bc_longest)
        losses, solved, played = [], 0, 0
        for _ in range(steps):
            idx = pool.draw(per_step, rng, among)
            trajs = reference_episodes(self.env_cls, self.env_options, [self.tasks.task(i) for i in idx],
                                       [pool.entries[i].task.solution for i in idx], self.builder,
                                       self.policy.tokenizer)
            self.seen.update(t.task.content for t in trajs)
            solved += sum(t.success for t in trajs)
            played += len(trajs)
            st = clone_step(self.policy, self.optimizer, trajs, self.cfg.algo, self.rng, self.cfg.evolve.bc_minibatches,
                            lr=self.cfg.evolve.bc_lr)
            losses.append(st["loss/bc"])
        moves = [len(pool.entries[i].task.solution or []) for i in among]
        return {"bc/steps": steps, "bc/tasks": len(among), "bc/min_moves": min(moves, default=0),
                "bc/demonstrations": played, "bc/demonstrations_solved": solved,
                "bc/loss_first": losses[0], "bc/loss_last": losses[-1],
                "bc/seconds": report.seconds_since(t0)}


class Evolver:
    """``Evolver(cfg).run()``: the rounds of ``selfevolve evolve`` in ``cfg.train.out_dir`` (module docstring)."""

    def __init__(self, cfg: Config, env=None, console: Console | None = None):
        self.env_cls = resolve_env(cfg, env)
        self.env_arg = env
        if getattr(self.env_cls, "profile", None) is None:
            raise SelfEvolveError(f"selfevolve evolve needs a world with a profile (env.name=frozenlake, sokoban, "
                                  f"shop or tables); {cfg.env.name!r} has none")
        exploration = hindsight.game_of(self.env_cls)
        options = hindsight.train_options(cfg, self.env_cls)
        hindsight.check_explorer(cfg, exploration)
        validation.check(cfg)
        if exploration is not None:
            exploration.game.check_options(options)
        make_env(self.env_cls, **options)  # bad options fail here, before anything is written
        self.console = console or Console(stderr=True)
        self.out = Path(cfg.train.out_dir)
        # model.matmul_dtype=auto chosen once for every round (or the resumed run's choice), recorded in its state
        saved = self._saved_config(cfg)
        self.cfg = as_saved(resolve_products(cfg, saved, self.console), saved, self.console)
        self.state = self._open()
        self.policy = None  # the latest policy (the last round's trainer's), for the next exploration

    # ---- the run folder ---------------------------------------------------------------------------------------
    def _dump(self) -> dict:
        d = self.cfg.model_dump(mode="json")
        return {**{k: d[k] for k in COMPARED}, "train.steps": self.cfg.train.steps}

    def _saved_config(self, cfg: Config) -> dict | None:
        """The settings the run being resumed saved (``_dump``); None when starting one."""
        path = self.out / STATE
        if not (cfg.train.resume and path.is_file()):
            return None
        return json.loads(path.read_text()).get("config", {})

    def _open(self) -> dict:
        path = self.out / STATE
        if self.out.exists() and not self.out.is_dir():
            raise SelfEvolveError(f"train.out_dir={str(self.out)!r} is a file, not a folder")
        if path.is_file() and self.cfg.train.resume:
            state = json.loads(path.read_text())
            saved = state.get("config", {})
            diff = resume_differences(saved, self.cfg.model_dump(mode="json"), COMPARED)
            if saved.get("train.steps") != self.cfg.train.steps:
                diff.append("train.steps")
            if diff:
                as_saved_run = {**saved, "train": {"steps": saved.get("train.steps")}}  # train.steps is saved flat
                raise SelfEvolveError(f"cannot resume {self.out}: its {', '.join(diff)} settings differ from this "
                                      f"config; only eval.* and train.* other than train.steps may change"
                                      + resume_hint(as_saved_run, diff))
            return state
        if path.is_file() and not self.cfg.train.overwrite:
            raise SelfEvolveError(f"train.out_dir={str(self.out)!r} already holds an evolve run. Continue it with "
                                  f"train.resume=true, replace it with train.overwrite=true, or choose another "
                                  f"train.out_dir.")
        if path.is_file():  # overwrite: only what an evolve run writes
            import shutil

            for p in [*self.out.glob("round-*"), self.out / validation.FOLDER]:
                shutil.rmtree(p, ignore_errors=True)
            for name in (STATE, report.MARKDOWN, report.JSON, report.FIGURE):
                (self.out / name).unlink(missing_ok=True)
        self.out.mkdir(parents=True, exist_ok=True)
        return {"config": self._dump(), "env": self.cfg.env.name, "rounds": []}

    def _save(self) -> None:
        tmp = self.out / (STATE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.out / STATE)

    def _round(self, r: int) -> dict:
        while len(self.state["rounds"]) <= r:
            self.state["rounds"].append({"round": len(self.state["rounds"]), "stages": []})
        return self.state["rounds"][r]

    def say(self, text: str) -> None:
        self.console.print(text, highlight=False)

    # ---- the loop -------------------------------------------------------------------------------------------
    def run(self) -> dict:
        cfg, t0 = self.cfg, time.perf_counter()
        pool = TaskPool(cfg.sampling.prior, cfg.sampling.prior_weight, cfg.sampling.floor, cfg.evolve.curriculum)
        for r in range(cfg.evolve.rounds):
            rec, folder = self._round(r), self.out / f"round-{r}"
            folder.mkdir(parents=True, exist_ok=True)
            if "trained" in rec["stages"]:
                pool.load(folder, "pool_end")
                continue
            if r == 0 and cfg.evolve.start_eval and "start_eval" not in self.state:
                t1 = time.perf_counter()
                self.state["start_eval"] = self._evaluate(self._policy_for(0))
                self.state["start_eval_seconds"] = report.seconds_since(t1)
                self._save()
                self.say(f"held-out success before round 0: {self.state['start_eval']['eval/success']:.3f}")
            if r == 0 and cfg.evolve.keep == "best" and "validation" not in self.state:
                self._write_validation()
            explored = cfg.evolve.reexplore or r == 0
            if "written" not in rec["stages"]:
                records = self._explore(r, rec, folder) if explored else []
                if explored:
                    self._write(r, rec, folder, records, pool)
                else:
                    rec["write"] = {"skipped": "evolve.reexplore=false: only round 0 explores"}
                pool.save(folder)
                rec["pool"] = {"tasks": len(pool)}
                rec["stages"].append("written")
                self._save()
            else:
                pool.load(folder)
            self._train(r, rec, folder, pool)
            rec["stages"].append("trained")
            self._save()
            report.write(self.out, self.state)
        report.write(self.out, self.state)
        self.policy = None
        summary = report.summary(self.state)
        if summary.get("kept_round") is not None:
            k = summary["kept_round"]
            self.say(f"kept round {k} (the highest validation success): held-out success "
                     f"{summary['kept']:.3f}; its policy: {self.out / f'round-{k}' / 'train'}")
        summary["seconds"] = time.perf_counter() - t0
        return summary

    def _policy_for(self, r: int):
        """The policy that explores round ``r``: the last trained one when still in memory, else the starting
        adapter (``model.init_from``) for round 0 or round ``r - 1``'s trained adapter."""
        if self.policy is None:
            from selfevolve.train.checkpoint import load_init_adapter

            cfg = self.cfg if r == 0 else self.cfg.model_copy(
                update={"model": self.cfg.model.model_copy(update={"init_from": str(self.out / f"round-{r - 1}" /
                                                                                   "train")})})
            # it explores, writes and evaluates: the update's bf16 copy only where exploring computes with it
            self.policy = build_policy(cfg if cfg.evolve.acting_precision == "update" else acting_only(cfg))
            load_init_adapter(cfg, self.policy)
        return self.policy

    def _acting(self, policy):
        """The block for generation that nothing trains on (exploring, the validation score): the products in the
        update's precision with ``evolve.acting_precision=update`` (``Policy.updating``: bf16 under
        ``model.matmul_dtype=bf16_update``; nothing where the update has no precision of its own)."""
        if policy is None or self.cfg.evolve.acting_precision != "update":
            return contextlib.nullcontext()
        return policy.updating()

    def _builder(self, policy):
        return build_prompt(self.cfg, policy, make_env(self.env_cls, **hindsight.train_options(self.cfg, self.env_cls)))

    def _evaluate(self, policy) -> dict:
        cfg, e = self.cfg, self.cfg.eval
        options = eval_env_options(self.env_cls, cfg.env.options(), e.env)
        builder = build_prompt(cfg, policy, make_env(self.env_cls, **options))
        return evaluate(policy, self.env_cls, options, builder, episodes=e.episodes, pass_k=e.pass_k,
                        seed_offset=e.seed_offset, sample_seed=cfg.seed, batch=e.batch)

    def _write_validation(self) -> None:
        """``evolve.keep=best``: the validation tasks (``evolve/validation.py``), written once before round 0."""
        written = validation.build(self.cfg, self.env_cls, self.out)
        if written.get("tasks") == 0:
            written["skipped"] = (f"no validation task of {written['min_moves']}+ moves was written, so the run keeps "
                                  f"its last round")
        self.state["validation"] = written
        self._save()
        self.say(f"validation: {written['skipped']}" if "skipped" in written else
                 f"validation: {written['tasks']} hindsight tasks of {written['min_moves']}+ moves from "
                 f"{self.cfg.evolve.validation_explorations - written['left_out']} random-move explorations of "
                 f"training sandboxes no round explores")

    def _validate(self, r: int, rec: dict, policy) -> None:
        """Score round ``r``'s policy on the validation tasks (when the run has them and the round has no score)."""
        written = self.state.get("validation", {})
        if self.cfg.evolve.keep != "best" or not written.get("tasks") or "validation" in rec:
            return
        with self._acting(policy):
            rec["validation"] = validation.score(self.cfg, self.env_cls, policy, self.out, written["tasks"])
        self._save()
        self.say(f"round {r}: validation success {rec['validation']['success']:.3f}")

    def _explore(self, r: int, rec: dict, folder: Path) -> list[ExplorationRecord]:
        from selfevolve.questioning.explore import load_explorations, save_explorations

        q = self.cfg.questioning
        if "explored" in rec["stages"]:
            return load_explorations(str(folder / "explorations.jsonl"), self.cfg.env.name)
        randomly = self.cfg.evolve.explorer == "random"
        policy = None if randomly else self._policy_for(r)  # the random explorer asks no model: none is loaded
        t0 = time.perf_counter()
        who = " with random moves" if randomly else ""
        self.say(f"round {r}: exploring {self.cfg.env.name}{who} ({q.explorations} explorations x {q.steps} turns)")
        builder = None if policy is None else self._builder(policy)
        with self._acting(policy):
            records = hindsight.explore_round(self.cfg, self.env_cls, policy, builder,
                                              first_seed=r * q.explorations, seed=self.cfg.seed * 1000 + r)
        save_explorations(folder, records)
        rec["explore"] = {**hindsight.exploration_stats(records, self.env_cls, self.cfg),
                          **({"explorer": "random"} if randomly else {}),
                          "seconds": report.seconds_since(t0)}
        rec["stages"].append("explored")
        self._save()
        return records

    def _write(self, r: int, rec: dict, folder: Path, records: list, pool: TaskPool) -> None:
        t0 = time.perf_counter()
        writer = None if self.cfg.evolve.writer == "template" else self._policy_for(r)  # the template asks no model
        kept, written = hindsight.write_tasks(self.cfg, self.env_cls, records, writer, pool.keys(),
                                              [e.task.instruction for e in pool.entries], folder, TaskPool.key)
        pool.add(kept, r)
        rec["write"] = {**written, "seconds": report.seconds_since(t0)}
        self.say(f"round {r}: kept {written['kept']} of {written['candidates']} candidate tasks (removed: "
                 + ", ".join(f"{k} {v}" for k, v in written["removed"].items() if v) + f"); pool {len(pool)}")

    def _round_config(self, r: int, folder: Path) -> Config:
        cfg = self.cfg
        data = cfg.model_dump(mode="json")
        data["env"] = {**data["env"], "split": "synth", "tasks_file": str(folder / "tasks.jsonl")}
        total = cfg.train.steps if cfg.evolve.rl else 0  # evolve.rl=false: the rounds only clone
        steps = rl_steps(total, cfg.evolve.rounds, cfg.evolve.rl_from_round, r)
        data["train"].update(out_dir=str(folder / "train"), steps=steps, resume=True, overwrite=False,
                             warm_start_steps=0)
        data["eval"]["at_start"] = False
        if r > 0:
            data["model"]["init_from"] = str(self.out / f"round-{r - 1}" / "train")
            data["model"]["init_optimizer"] = cfg.evolve.carry_optimizer
        return _validate(data)

    def _train(self, r: int, rec: dict, folder: Path, pool: TaskPool) -> None:
        cfg = self.cfg
        if not len(pool):
            self.say(f"round {r}: the pool is empty; nothing to train on")
            rec["train"] = {"skipped": "empty pool"}
            rec["eval"] = dict(self._last_eval(r))
            pool.save(folder, "pool_end")
            return
        rcfg = self._round_config(r, folder)
        seeds = pool_seeds(make_env(self.env_cls, **rcfg.env.options()), pool)
        tasks = PoolTasks(pool, self.cfg.env.name, seeds, seed=cfg.seed * 1000 + r,
                          buffer_per_task=cfg.evolve.buffer_per_task,
                          buffer_rows=buffer_rows if cfg.evolve.imitation_weight > 0 else None,
                          among=pool.longest(cfg.evolve.rl_longest))  # 1: every task, in pool order
        self.policy = None
        gc.collect()
        t0 = time.perf_counter()
        trainer = EvolveTrainer(rcfg, tasks, env=self.env_arg, console=self.console)
        bc = {}
        if not trainer.resumed:
            n = share(cfg.evolve.bc_steps, cfg.evolve.rounds, r)
            if n:
                self.say(f"round {r}: behaviour cloning on the pool's references ({n} steps x {cfg.evolve.bc_tasks})")
            bc = trainer.clone_references(n, cfg.evolve.bc_tasks, seed=cfg.seed * 1000 + r)
            rec["bc"] = bc
            self._save()
        self.say(f"round {r}: {rcfg.train.steps} RL updates on {len(pool)} pool tasks")
        trainer.train()
        figures = report.train_figures(folder / "train")
        if not trainer.last_eval:  # a round without updates (rl_from_round, rl=false) evaluates here, episodes logged
            t1 = time.perf_counter()
            trainer.last_eval = trainer.evaluate(label="end")
            figures["time/eval"] = report.seconds_since(t1)
        rec["eval"] = dict(trainer.last_eval)
        G = rcfg.algo.group_size
        groups = report.metric_sum(folder / "train", "sampling/groups") if rcfg.sampling.dynamic else \
            figures["updates"] * rcfg.train.tasks_per_step
        rec["train"] = {**figures, "rollouts": int(groups * G), "seconds": report.seconds_since(t0)}
        pool.save(folder, "pool_end")
        rec["pool"] = {"tasks": len(pool), "histogram": pool.histogram(),
                       "buffered": sum(len(e.buffer) for e in pool.entries)}
        self.say(f"round {r}: held-out success {rec['eval'].get('eval/success', 0):.3f}")
        self._validate(r, rec, trainer.policy)
        self.policy = trainer.policy
        trainer.close()

    def _last_eval(self, r: int) -> dict:
        for k in range(r - 1, -1, -1):
            if self.state["rounds"][k].get("eval"):
                return self.state["rounds"][k]["eval"]
        return self.state.get("start_eval", {})
