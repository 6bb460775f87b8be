"""What the trainer and the rollout call: :class:`Experience` (the run's pool, its LLM, learning after each step)
and :class:`RolloutGuide` (one batch of episodes: intents, insight blocks, recall at every turn).

The trainer calls four things and nothing else: ``Experience.build`` (the pool: seeded, imported or resumed),
``guide(...)`` for a batch of rollouts, ``prepare_rows`` before the update (navigation's old log-probs and
boost), ``learn(...)`` after the update (accumulate successes, distil insights).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from pathlib import Path

from selfevolve.agent.guidance import Guidance
from selfevolve.agent.transcript import history_text
from selfevolve.envs import env_options, make_env
from selfevolve.experience import navigation as nav
from selfevolve.experience.embed import Embedder
from selfevolve.experience.intent import classify, declared_intents
from selfevolve.experience.pool import FILE, ExperiencePool
from selfevolve.experience.recall import Query, SeerRecall, Weights
from selfevolve.experience.records import tool_sequence, trajectory_item
from selfevolve.models.llm import LLM
from selfevolve.rewards.judge import game_rules
from selfevolve.types import Step, Task, Trajectory


def true_intent(env) -> str | None:
    """The intent of the task an environment is playing (the tool worlds know it), for the oracle and for
    measuring the classifier."""
    task = getattr(env, "task", None)
    return getattr(task, "intent", None)


def expert_episode(env, first: str, task: Task) -> Trajectory:
    """The environment's expert played from its current start (no model): a trajectory of action texts."""
    traj = Trajectory(task=task)
    for _ in range(getattr(env, "max_turns", 10) * 4):
        action = env.expert_action()
        if action is None:
            break
        obs, reward, done, info = env.step(action)
        traj.steps.append(Step(prompt_ids=[], action_ids=[], logprobs=[], action_text=action, observation=obs,
                               reward=float(reward), done=bool(done), valid=bool(info.get("valid_action", True)),
                               info={k: v for k, v in info.items() if k in ("tool_call", "intent", "success")}))
        traj.success = bool(info.get("success", False))
        if done:
            break
    return traj


def seed_items(env_cls, options: dict, n: int, env_name: str):
    """Cold start: expert episodes of ``n`` *training* tasks (reference solutions; a world with a ``split``
    plays its train split), spread round-robin over intents; successful ones only. A world without an
    expert gives its static few-shot examples as one seed."""
    from selfevolve.experience.pool import NewItem

    if n <= 0:
        return []
    opts = {**options, **({"split": "train"} if "split" in env_options(env_cls) else {})}
    env = make_env(env_cls, **opts)
    items = []
    tasks = getattr(env, "tasks", None)
    if tasks is not None and hasattr(env, "load"):  # a tool world: pick tasks round-robin over intents
        by_intent: dict[str, list] = defaultdict(list)
        for t in tasks:
            by_intent[t.intent].append(t)
        order, i = [], 0
        while len(order) < min(n, len(tasks)):
            for lst in by_intent.values():
                if i < len(lst) and len(order) < n:
                    order.append(lst[i])
            i += 1
        starts = [(lambda t=t: env.load(t), t.id) for t in order]
    else:
        starts = [(lambda s=s: env.reset(s), f"{env_name}-train-{s}") for s in range(n)]
    for start, task_id in starts:
        first = start()
        intent = true_intent(env)
        traj = expert_episode(env, first, Task(id=task_id, env=env_name, seed=0, intent=intent))
        if traj.success:
            items.append(trajectory_item(traj, first, intent, env_name))
    if not items and env_cls.examples:  # no expert: the static examples are the one seed
        turns = list(env_cls.examples)
        text = "\n".join([f"Request: {turns[0][0]}"] + [f"Action: {a}\nResult: {o}" for (_, a), (o, _) in
                                                        zip(turns, turns[1:] + [("", "")])])
        items.append(NewItem(kind="trajectory", text=text, key_text=turns[0][0], turns=turns, success=True,
                             task_id=f"{env_name}-examples", env=env_name))
    return items


class Experience:
    """The run's experience: pool, embedder, LLM, and the ``experience.*`` options."""

    def __init__(self, cfg, out_dir: str | Path | None, policy, env_cls, env_opts: dict, env_name: str,
                 pool: ExperiencePool | None = None):
        self.cfg, self.x = cfg, cfg.experience
        self.env_cls, self.env_opts, self.env_name = env_cls, env_opts, env_name
        self.embedder = Embedder(self.x.embedder)
        path = Path(out_dir) / FILE if out_dir is not None else ":memory:"
        self.pool = pool or ExperiencePool(path, self.embedder)
        self.llm = LLM(self.x.llm, policy, log_dir=out_dir, max_new_tokens=self.x.llm_max_new_tokens,
                       dtype=cfg.model.dtype, seed=cfg.seed, api=cfg.llm_api)
        self.intents = declared_intents(env_cls)
        self.rules = game_rules(make_env(env_cls, **env_opts))  # what the extractor is told of a game
        self.rng = random.Random(f"experience-{cfg.seed}")
        self.recall_seconds, self.recall_turns = 0.0, 0

    @classmethod
    def build(cls, cfg, out_dir, policy, env_cls, env_opts: dict, env_name: str, resume_step: int | None = None,
              console=None) -> "Experience":
        """The run's experience: on resume the pool as it was at the checkpoint (later rows dropped); on a new
        run the rows of ``experience.pool`` or the seed examples."""
        exp = cls(cfg, out_dir, policy, env_cls, env_opts, env_name)
        if resume_step is not None:
            dropped = exp.pool.truncate(resume_step)
            if dropped and console is not None:
                console.print(f"experience pool: dropped {dropped} rows added after step {resume_step}")
        elif exp.pool.count() == 0:
            if exp.x.pool:
                exp.pool.import_from(exp.x.pool, step=0)
            else:
                exp.pool.add(seed_items(env_cls, env_opts, exp.x.seed_examples, env_name), step=0, origin="seed")
        return exp

    @classmethod
    def at_checkpoint(cls, cfg, run_dir, step: int, policy, env_cls, env_opts: dict, env_name: str) -> "Experience":
        """A run's experience as it was at checkpoint ``step``, in memory (``selfevolve eval``: the run's own
        pool is only read; rows added after the checkpoint are left out)."""
        path = Path(run_dir) / FILE
        if not path.is_file():
            from selfevolve.errors import SelfEvolveError

            raise SelfEvolveError(f"{run_dir} was trained with experience.* but holds no {FILE}; evaluate it "
                                  f"with eval.experience=off")
        src = ExperiencePool(path, Embedder(cfg.experience.embedder))
        exp = cls(cfg, None, policy, env_cls, env_opts, env_name, pool=src.scratch_copy())
        src.close()
        exp.pool.truncate(step)
        return exp

    # ---- rollouts -------------------------------------------------------------------------------------------
    def guide(self, tasks: list[Task], group_size: int, *, training: bool, pool: ExperiencePool | None = None,
              envs=None) -> "RolloutGuide":
        """A guide for one batch of episodes (``tasks`` repeated ``group_size`` times each, in groups). Training:
        the first round(G·η) of each group carry insights; evaluation: every episode does."""
        return RolloutGuide(self, pool or self.pool, self.guided_flags(range(len(tasks)), group_size, training),
                            recall=self.x.recall == "seer", strip=training and self.x.train_prompt == "stripped")

    def guided_flags(self, indices, group_size: int, training: bool) -> list[bool]:
        """Which episodes of a batch (by their ``indices`` in it, a task's group contiguous) carry insights: the
        first round(G·η) of each group in training, every one in evaluation."""
        if not self.x.navigate:
            return [False] * len(indices)
        n = nav.guided_count(group_size, self.x.eta) if training else group_size
        return [(i % group_size) < n for i in indices]

    # ---- the update -----------------------------------------------------------------------------------------
    def prepare_rows(self, rows, logprobs_of) -> dict[str, float]:
        """Navigation's old log-probs and boost on the guided ``rows`` (``logprobs_of``: the objective's
        ``current_logprobs``)."""
        if not self.x.navigate and self.x.train_prompt != "stripped":
            return {}
        return nav.prepare_guided_rows(rows, logprobs_of, self.x.old_logprobs, self.x.boost_clip_high)

    # ---- after the update -----------------------------------------------------------------------------------
    def learn(self, trajs: list[Trajectory], step: int) -> dict[str, float]:
        """Online accumulation (verified successes into the pool) and insight extraction, at ``step``."""
        self.llm.step = step
        metrics: dict[str, float] = {}
        if self.x.accumulate:
            metrics["experience/added"] = float(self.absorb(trajs, self.pool, step, origin="rollout"))
        if self.x.navigate:
            groups = defaultdict(list)
            for t in trajs:
                groups[t.group_id].append(t)
            todo = []
            for members in groups.values():
                query = members[0].query or ""
                succ = [history_text(query, t.steps) for t in members if t.success]
                fail = [history_text(query, t.steps) for t in members if not t.success]
                # a game's task is its rules, then the start (the board alone does not say what the goal is)
                todo.append((f"{self.rules}\nStart:\n{query}" if self.rules else query, succ, fail))
            metrics.update(nav.extract(self.llm, self.pool, todo, step, self.x.dedup))
        metrics["experience/pool_trajectories"] = float(self.pool.count("trajectory"))
        metrics["experience/pool_insights"] = float(self.pool.count("insight"))
        return metrics

    def absorb(self, trajs: list[Trajectory], pool: ExperiencePool, step: int, origin: str) -> int:
        """Add the successful trajectories (the environment's verifier decided) not in the pool yet."""
        items, seen = [], set()
        for t in trajs:
            if not t.success or not t.steps:
                continue
            item = trajectory_item(t, t.query or "", t.intent, self.env_name)
            if item.text in seen or pool.has_text("trajectory", item.text):
                continue
            seen.add(item.text)
            items.append(item)
        return len(pool.add(items, step=step, origin=origin))


def guide_metrics(trajs: list[Trajectory], prefix: str = "experience/") -> dict[str, float]:
    """Guided share and success, intent accuracy, recalled items per turn."""
    out: dict[str, float] = {}
    if not trajs:
        return out
    guided = [t for t in trajs if t.guided]
    plain = [t for t in trajs if not t.guided]
    out[f"{prefix}guided_share"] = len(guided) / len(trajs)
    if guided:
        out[f"{prefix}guided_success"] = sum(t.success for t in guided) / len(guided)
    if plain and guided:
        out[f"{prefix}unguided_success"] = sum(t.success for t in plain) / len(plain)
    judged = [t for t in trajs if t.intent_true]
    if judged and any(t.classified for t in judged):
        out[f"{prefix}intent_accuracy"] = sum(t.intent == t.intent_true for t in judged) / len(judged)
    recalled = [len(s.info["recalled"]) for t in trajs for s in t.steps if "recalled" in s.info]
    if recalled:
        out[f"{prefix}recalled_per_turn"] = sum(recalled) / len(recalled)
    return out


class RolloutGuide:
    """The rollout's hook (``rollout(..., guide=...)``) for one batch of episodes."""

    def __init__(self, exp: Experience, pool: ExperiencePool, guided: list[bool], recall: bool,
                 seed: int | None = None, strip: bool = False):
        """``seed``: the recall's shuffle seed (None: drawn from the experience's RNG; a Ray worker is given the
        driver's). ``strip``: train on the prompts without the recalled examples (``experience.train_prompt``)."""
        self.exp, self.pool, self.guided, self.recall = exp, pool, guided, recall
        self.strip = recall and strip
        self.seed = exp.rng.randrange(2**31) if seed is None and recall else seed  # (no draw without recall)
        self.recaller = SeerRecall(pool, k=exp.x.k, mode=exp.x.mode, seed=self.seed,
                                   weights=Weights(exp.x.w_similarity, exp.x.w_tools, exp.x.w_intent)) \
            if recall else None
        self.seconds = 0.0  # time spent recalling (embedding + scoring)
        self.turns = 0

    def each(self, n: int) -> "RolloutGuide":
        """Every episode played ``n`` times, all with its guidance (best-of-N's candidates of one search)."""
        self.guided = [g for g in self.guided for _ in range(n)]
        return self

    def start(self, trajs: list[Trajectory], firsts: list[str], envs) -> list[Guidance]:
        x = self.exp.x
        for t, env in zip(trajs, envs):  # (the rollout has recorded each request as its query)
            if true_intent(env) is not None:
                t.intent_true = true_intent(env)
        if self.recall and self.exp.intents and x.intent != "none":
            if x.intent == "task":
                for t in trajs:
                    t.intent, t.classified = t.intent_true, True
            else:
                found, _ = classify(self.exp.llm, firsts, self.exp.intents)
                for t, intent in zip(trajs, found):
                    t.intent, t.classified = intent, True
        # experience.train_prompt=stripped: every recalled episode is trained on its prompt without the recall,
        # and so is off-policy as a self-navigating guided one is (its rows get the same old log-probs and clip)
        out = [Guidance(strip_examples=self.strip) for _ in trajs]
        if self.strip:
            for t in trajs:  # (Trajectory.guided: trained on a prompt other than the one it was sampled with)
                t.guided = True
        if any(self.guided) and self.pool.count("insight"):
            idx = [i for i, g in enumerate(self.guided) if g]
            vecs = self.pool.embedder.encode([firsts[i] for i in idx])
            for i, found in zip(idx, nav.retrieve(self.pool, vecs, x.insights_k)):
                if found:
                    out[i] = Guidance(block=nav.experience_block([(it.key_text, it.text) for it in found]),
                                      strip_examples=self.strip)
                    trajs[i].guided, trajs[i].insights = True, [it.id for it in found]
        return out

    def before_turn(self, turn: int, contexts, trajs: list[Trajectory]) -> None:
        """SEER: recall for every active episode from its history so far (query mode: at the first turn only)."""
        if not self.recall or (self.exp.x.mode == "query" and turn > 0):
            return
        t0 = time.perf_counter()
        query_only = self.exp.x.mode == "query"
        queries = [Query(text=t.query if query_only else history_text(t.query, t.steps),
                         tools=tool_sequence(t.steps), intent=t.intent) for t in trajs]
        for ctx, found in zip(contexts, self.recaller.recall(queries)):
            if not found:
                ctx.set_examples(None)  # nothing to recall: the static examples
                ctx.recalled = []
                continue
            ids = [it.id for it in found]
            if ctx.recalled is not None and set(ctx.recalled) == set(ids):
                continue  # the same experiences: keep their order (and the cached prompt)
            ordered = self.recaller.shuffled(found)
            ctx.set_examples(tuple(tuple(tuple(turn_) for turn_ in it.turns) for it in ordered))
            ctx.recalled = [it.id for it in ordered]
        spent = time.perf_counter() - t0
        self.seconds += spent
        self.turns += 1
        self.exp.recall_seconds += spent  # the run's totals (benchmarks report recall cost per turn)
        self.exp.recall_turns += 1
