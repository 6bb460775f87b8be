"""A Ray rollout worker: one policy replica and a pool of environments, playing its share of each step.

The driver (the trainer's process) keeps the optimizer and the update. Every step it pushes the adapter — the
LoRA tensors only, tagged with a version (the step number) — and sends each worker whole groups of episodes.
The worker plays them in one batched rollout with :func:`~selfevolve.rollout.collect.play_episodes`, the
function the local backend uses, so each episode samples exactly as it would in the driver.

This class is plain Python; ``selfevolve/distributed/ray_rollout.py`` makes it a Ray actor.
"""

from __future__ import annotations

import os
import socket
import time


class StaleWeights(RuntimeError):
    """A rollout was asked of a worker that does not hold the weights of that version."""


def base_fingerprint(policy) -> float:
    """A checksum of the frozen base weights: a worker whose base model differs from the driver's (another
    file, another ``tiny`` seed) would sample from a different policy than the one the driver updates."""
    import torch

    with torch.no_grad():
        return float(sum(p.detach().double().sum() for n, p in policy.model.named_parameters() if "lora_" not in n))


def lora_state(policy, values: bool = False) -> dict:
    """What the driver pushes: the adapter's LoRA tensors (on the CPU); the value head's too with ``values``
    (search's value scorer reads it on the workers), else none (the workers only sample)."""
    from selfevolve.models.policy import VALUE_PREFIX

    return {k: v for k, v in policy.adapter_state().items() if values or not k.startswith(VALUE_PREFIX)}


def reads_values(cfg) -> bool:
    """Whether the workers of ``cfg`` read state values: search's value scorer does (rollout/search/scoring.py)."""
    from selfevolve.rollout.search import SearchSpec

    return SearchSpec.from_config(cfg).needs_value


class RolloutWorker:
    """One policy replica; ``name`` is how the driver reports it (``rollout-worker-1``)."""

    def __init__(self, name: str, cfg_data: dict, env_cls, env_options: dict):
        import torch

        from selfevolve.config import Config
        from selfevolve.envs import make_env
        from selfevolve.build import acting_only, build_policy, build_prompt
        from selfevolve.envs.pool import EnvPool
        from selfevolve.objectives import value_head_kind

        self.name = name
        cfg = Config.model_validate(cfg_data)
        torch.set_num_threads(cfg.distributed.worker_cpus)  # the CPUs Ray reserved for it, no more
        torch.manual_seed(cfg.seed)
        self.cfg, self.env_cls, self.env_options = cfg, env_cls, env_options
        # no value head unless search scores states by it: the driver reads values in its update
        self.values = reads_values(cfg)
        # a worker only samples: no bf16 copy for model.matmul_dtype=bf16_update (build.acting_only)
        self.policy = build_policy(acting_only(cfg), value_head=value_head_kind(cfg) if self.values else None)
        self.builder = build_prompt(cfg, self.policy, make_env(env_cls, **env_options))
        self.pool = EnvPool(env_cls, env_options)  # the episodes' environments, reused across calls
        self.version: int | None = None  # the version of the weights it holds; None until the first push
        self._stall = 0.0
        self.experience = None  # experience.*: recall from the driver's pool, sent with each step (_guide)

    def ready(self) -> dict:
        """Who and where it is, and its base model's checksum (the driver compares it with its own)."""
        return {"name": self.name, "pid": os.getpid(), "host": socket.gethostname(),
                "fingerprint": base_fingerprint(self.policy)}

    def load_weights(self, version: int, state: dict) -> int:
        self.policy.load_adapter_state(state, value_head="strict" if self.values else "ignore")
        self.version = version
        return version

    def rollout(self, version: int, step: int, episodes: list, pool: bytes | None = None, seed: int | None = None,
                llm_step: int = 0):
        """``(trajectories, stats, experience)`` of ``episodes`` (whole groups), sampled with weights ``version``.

        With ``experience.*`` the driver sends its pool as it is at this step (``pool``, bytes), the recall's
        shuffle seed and the step its LLM calls belong to: the episodes are guided as in the driver, and
        ``experience`` returns the recall's time and turns and the LLM calls made (intents), for the driver's log."""
        from selfevolve.rollout.collect import play_episodes
        from selfevolve.rollout.runner import RolloutStats

        if self._stall:  # the fault tests' stalled worker
            time.sleep(self._stall)
            self._stall = 0.0
        if version != self.version:
            raise StaleWeights(f"{self.name} holds weights version {self.version}, asked to sample with {version}")
        stats = RolloutStats()
        guide = self._guide(episodes, pool, seed, llm_step) if pool is not None else None
        trajs = play_episodes(self.policy, self.builder, self.env_cls, self.env_options, episodes,
                              run_seed=self.cfg.seed, step=step, version=version, stats=stats, pool=self.pool,
                              guide=guide)
        return trajs, stats, self._experience_back(guide)

    def _experience_back(self, guide) -> dict:
        """What the driver learns of the guide's work: the recall's time and turns, the LLM calls made."""
        if guide is None:
            return {}
        log = self.experience.llm.log_path
        calls = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
        log.unlink(missing_ok=True)
        return {"recall_seconds": guide.seconds, "recall_turns": guide.turns, "llm_calls": calls}

    def _guide(self, episodes: list, pool: bytes, seed: int | None, llm_step: int, group_size: int | None = None):
        """The experience's guide for ``episodes`` (or searches: ``group_size`` of them a task), recalling from
        the driver's ``pool``: which ones are guided follows from their places in the step's batch, as in the
        driver."""
        import tempfile

        from selfevolve.experience.guide import Experience, RolloutGuide
        from selfevolve.experience.pool import ExperiencePool

        if self.experience is None:  # its LLM's calls are written here, then sent to the driver
            self.experience = Experience(self.cfg, tempfile.mkdtemp(prefix=f"{self.name}-"), self.policy,
                                         self.env_cls, self.env_options, self.cfg.env.name)
        exp = self.experience
        exp.pool.close()
        exp.pool = ExperiencePool.from_bytes(pool, exp.embedder)
        exp.llm.step = llm_step
        guided = exp.guided_flags([e.index for e in episodes], group_size or self.cfg.algo.group_size, training=True)
        return RolloutGuide(exp, exp.pool, guided, recall=exp.x.recall == "seer", seed=seed,
                            strip=exp.x.train_prompt == "stripped")

    def search(self, version: int, step: int, jobs: list, max_turns: int, critic_suffix: list[int],
               pool: bytes | None = None, seed: int | None = None, llm_step: int = 0):
        """``(search result, experience)`` of ``jobs`` (whole task groups of searches), sampled with weights
        ``version``; each search seeded by its position in the step (``rollout/collect.play_searches``); guided
        by the driver's experience as :meth:`rollout` is."""
        from selfevolve.rollout.collect import play_searches
        from selfevolve.rollout.search import SearchSpec

        if version != self.version:
            raise StaleWeights(f"{self.name} holds weights version {self.version}, asked to search with {version}")
        spec = SearchSpec.from_config(self.cfg)
        per_task = self.cfg.algo.group_size // spec.kept_per_search()
        guide = self._guide(jobs, pool, seed, llm_step, per_task) if pool is not None else None
        result = play_searches(self.policy, self.builder, jobs, spec, run_seed=self.cfg.seed, step=step,
                               version=version, max_turns=max_turns, critic_suffix=critic_suffix, pool=self.pool,
                               guide=guide)
        return result, self._experience_back(guide)

    def stall(self, seconds: float) -> None:
        """For tests: the next rollout call first sleeps ``seconds`` (a worker that hangs)."""
        self._stall = float(seconds)
