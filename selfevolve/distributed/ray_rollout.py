"""Training rollouts on Ray workers (``distributed.backend=ray``; docs/scaling.md).

Each step the driver pushes the adapter (LoRA tensors, versioned by the step number) to every worker that does
not hold that version yet, splits the step's groups over the workers (a group is never split: its G episodes
are played by one worker) and waits for all of them. Episodes are seeded by themselves, so the trajectories
are those of the local backend, in the same order, whatever the number of workers.

Failing loudly is the point of most of this file. Peer systems' users report hangs and silent stalls more than
anything else (docs/scaling.md), so:

- every remote call has a deadline (``distributed.start_timeout``, ``distributed.rollout_timeout``);
- a worker that dies (killed, out of memory, node lost) or misses its deadline is named in a warning, killed,
  replaced by a fresh one, and its episodes re-run with the same seeds: the step ends with the same groups;
- after ``distributed.max_restarts`` restarts of one worker within a step, the step fails with an error that
  names the worker and why;
- more workers than the cluster has CPUs for is refused up front (Ray would leave the extra actors pending
  forever).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from selfevolve.distributed.worker import RolloutWorker, base_fingerprint, lora_state, reads_values
from selfevolve.errors import ConfigError, SelfEvolveError
from selfevolve.rollout.collect import step_episodes
from selfevolve.rollout.runner import RolloutStats
from selfevolve.rollout.search import SearchResult, SearchStats

log = logging.getLogger("selfevolve.distributed")

# Passed on to the workers when set in the driver (offline hub, model cache).
_PASSED_ENV = ("HF_HUB_OFFLINE", "HF_HOME", "SELFEVOLVE_CACHE", "TRANSFORMERS_OFFLINE")


def _ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("distributed.backend=ray needs the ray package: pip install ray") from None
    return ray


def split_groups(episodes: list, group_size: int, workers: int) -> list[list]:
    """``workers`` contiguous shares of whole groups, as even as the group count allows (some may be empty)."""
    n = len(episodes) // group_size
    bounds = [k * n // workers for k in range(workers + 1)]
    return [episodes[bounds[k] * group_size: bounds[k + 1] * group_size] for k in range(workers)]


class _Slot:
    """A worker's place: its name stays when the actor behind it is replaced."""

    def __init__(self, name: str):
        self.name, self.actor, self.version, self.info = name, None, None, {}


class RayRollouts:
    def __init__(self, cfg, env_cls, env_options: dict, console=None, experience=None):
        """``experience``: the run's (``experience.*``), whose pool the workers are sent each step."""
        self.ray = _ray()
        self.experience = experience
        self.cfg, self.d = cfg, cfg.distributed
        self.env_cls, self.env_options = env_cls, env_options
        self.console = console
        self.slots = [_Slot(f"rollout-worker-{k}") for k in range(self.d.workers)]
        self.events: list[str] = []  # every warning about a worker, as logged
        self._owns_ray = False
        self._fingerprint: float | None = None
        self._warned_idle = False

    # ---- starting ---------------------------------------------------------------------------------------------
    def _runtime_env(self) -> dict:
        """Workers import this very selfevolve (a source checkout too) and use exactly their reserved CPUs."""
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        threads = str(self.d.worker_cpus)
        env = {"PYTHONPATH": path, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
               "TOKENIZERS_PARALLELISM": "false"}
        return {"env_vars": env | {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}}

    def _init_ray(self) -> None:
        ray, d = self.ray, self.d
        if not ray.is_initialized():
            if d.address is None:  # a private Ray of this run, sized for its workers
                ray.init(num_cpus=d.num_cpus or d.workers * d.worker_cpus, include_dashboard=False,
                         configure_logging=False, log_to_driver=False)
                self._owns_ray = True
            else:
                ray.init(address=d.address, configure_logging=False, log_to_driver=False)
        need, have = d.workers * d.worker_cpus, ray.cluster_resources().get("CPU", 0)
        if need > have:
            raise ConfigError(
                f"distributed.workers={d.workers} x distributed.worker_cpus={d.worker_cpus} = {need} CPUs, but the "
                f"Ray cluster has {have:g}: the extra workers would wait for a CPU forever. Use fewer workers, "
                f"or a larger distributed.num_cpus (local Ray) or cluster")

    def start(self, policy) -> None:
        """Start every worker (in parallel) and check each against the driver's base model."""
        if all(s.actor is not None for s in self.slots):
            return
        self._init_ray()
        self._fingerprint = base_fingerprint(policy)
        todo = [s for s in self.slots if s.actor is None]
        for s in todo:
            self._spawn(s)
        self._await_ready(todo)

    def _spawn(self, slot: _Slot) -> None:
        remote = self.ray.remote(num_cpus=self.d.worker_cpus, max_restarts=0)(RolloutWorker)
        slot.actor = remote.options(runtime_env=self._runtime_env()).remote(
            slot.name, self.cfg.model_dump(mode="json"), self.env_cls, self.env_options)
        slot.version = None

    def _await_ready(self, slots: list[_Slot]) -> None:
        ray, timeout = self.ray, self.d.start_timeout
        refs = {s.actor.ready.remote(): s for s in slots}
        done, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        if late:
            names = ", ".join(refs[r].name for r in late)
            for s in slots:  # none left pending for a CPU after the error
                self.ray.kill(s.actor, no_restart=True)
                s.actor = None
            raise SelfEvolveError(f"{names} did not start within distributed.start_timeout={timeout:g}s (model "
                                  f"load, or no free CPU in the cluster: see `ray status`)")
        for ref in done:
            slot = refs[ref]
            try:
                slot.info = ray.get(ref)
            except ray.exceptions.RayError as e:
                raise SelfEvolveError(f"{slot.name} failed to start: {_first_line(e)}") from None
            fp = slot.info["fingerprint"]
            if abs(fp - self._fingerprint) > 1e-6 * max(1.0, abs(self._fingerprint)):
                raise SelfEvolveError(f"{slot.name} on {slot.info['host']} loaded a different base model than the "
                                      f"driver (checksum {fp:.6g} vs {self._fingerprint:.6g}); model.name "
                                      f"{self.cfg.model.name!r} must name the same weights on every node")

    # ---- one step ---------------------------------------------------------------------------------------------
    def collect(self, policy, tasks, step: int):
        """``(trajectories in batch order, stats, metrics)``: the local backend's result, played by the workers."""
        self.start(policy)
        t0 = time.perf_counter()
        G = self.cfg.algo.group_size
        shares = split_groups(step_episodes(tasks, G, step), G, len(self.slots))
        weights = self._weights(policy)
        guide = self._experience_args(tasks, G)
        put_s = time.perf_counter() - t0
        results, restarts = self._run(shares, step, weights, "rollout", *guide)
        # the shares are contiguous slices of the batch: in worker order, the trajectories are in batch order
        trajs = [t for k in sorted(results) for t in results[k][0]]
        stats = RolloutStats(seconds=time.perf_counter() - t0)
        for _, st, _ in results.values():
            stats.prompt_tokens += st.prompt_tokens
            stats.new_tokens += st.new_tokens
            stats.generate_calls += st.generate_calls
        if len(trajs) != len(tasks) * G:
            raise SelfEvolveError(f"the workers returned {len(trajs)} trajectories for {len(tasks) * G} episodes")
        for t in trajs:
            if t.policy_version != step:  # the workers check it too; a mismatch here would be a bug
                raise SelfEvolveError(f"a trajectory of step {step} was sampled with weights version "
                                      f"{t.policy_version}")
        metrics = self._step_metrics(shares, len(tasks), restarts, put_s)
        if guide:
            metrics.update(self._experience_back([results[k][2] for k in sorted(results)]))
        return trajs, stats, metrics

    def _experience_args(self, tasks, group_size: int) -> tuple:
        """What the workers need to guide their episodes (``RolloutWorker.rollout``): the pool as it is now (one
        copy in the object store), the recall's shuffle seed — drawn here, from the run's experience RNG, as a
        local step draws it — and the step the LLM calls belong to. Empty without ``experience.*``."""
        if self.experience is None:
            return ()
        exp = self.experience
        batch = [t for t in tasks for _ in range(group_size)]
        seed = exp.guide(batch, group_size, training=True).seed  # (the guided flags are the workers' to compute)
        return self.ray.put(exp.pool.to_bytes()), seed, exp.llm.step

    def _experience_back(self, parts: list[dict]) -> dict:
        """The workers' LLM calls appended to the run's log, in batch order; the recall's cost per turn."""
        calls = [line for p in parts for line in p["llm_calls"]]
        if calls:
            with (Path(self.cfg.train.out_dir) / "llm_calls.jsonl").open("a", encoding="utf-8") as f:
                f.write("\n".join(calls) + "\n")
        seconds, turns = sum(p["recall_seconds"] for p in parts), sum(p["recall_turns"] for p in parts)
        self.experience.recall_seconds += seconds
        self.experience.recall_turns += turns
        return {"experience/recall_s_per_turn": seconds / turns} if turns else {}

    def search(self, policy, tasks, step: int, spec, *, max_turns: int, generator=None, rng=None,
               critic_suffix=()) -> tuple[SearchResult, dict]:
        """``(search result, metrics)`` of the step's searches, split over the workers by whole task groups.
        Each search is seeded by its position in the step (``rollout/collect.play_searches``): ``generator`` and
        ``rng`` (the local backend's shared stream and tie-breaker) are not used."""
        self.start(policy)
        t0 = time.perf_counter()
        per_task = self.cfg.algo.group_size // spec.kept_per_search()
        shares = split_groups(step_episodes(tasks, per_task, step), per_task, len(self.slots))
        weights = self._weights(policy)
        guide = self._experience_args(tasks, per_task)
        put_s = time.perf_counter() - t0
        results, restarts = self._run(shares, step, weights, "search", max_turns, list(critic_suffix), *guide)
        trajs, trees, stats = [], [], SearchStats()
        for k in sorted(results):  # contiguous shares: in worker order, everything is in batch order
            part = results[k][0]
            for t in part.trajectories:  # a kept trajectory names its tree by its index in the step's list
                t.search = {**t.search, "tree": t.search["tree"] + len(trees)}
            trajs += part.trajectories
            trees += part.trees
            for f in ("prompt_tokens", "new_tokens", "generate_calls", "candidates", "lookahead_tokens"):
                setattr(stats, f, getattr(stats, f) + getattr(part.stats, f))
        stats.seconds = time.perf_counter() - t0
        if len(trajs) != len(tasks) * self.cfg.algo.group_size:
            raise SelfEvolveError(f"the workers returned {len(trajs)} kept trajectories for "
                                  f"{len(tasks) * self.cfg.algo.group_size}")
        metrics = self._step_metrics(shares, len(tasks), restarts, put_s)
        if guide:
            metrics.update(self._experience_back([results[k][1] for k in sorted(results)]))
        return SearchResult(trajs, trees, stats), metrics

    def _weights(self, policy):
        """The adapter, as one copy in the object store read by every worker (with the value head when the
        workers' search reads values)."""
        return self.ray.put(lora_state(policy, values=reads_values(self.cfg)))

    def _step_metrics(self, shares: list[list], groups: int, restarts: int, put_s: float) -> dict:
        busy = sum(1 for s in shares if s)
        if busy < len(self.slots) and not self._warned_idle:
            self._warned_idle = True
            self._warn(f"a step has {groups} groups for distributed.workers={len(self.slots)}: "
                       f"{len(self.slots) - busy} workers stay idle (groups are never split)")
        return {"distributed/workers_busy": busy, "distributed/restarts": restarts, "distributed/put_s": put_s}

    def _run(self, shares: list[list], step: int, weights, method: str, *args):
        """Run every non-empty share on its worker (``RolloutWorker.<method>(version, step, share, *args)``);
        restart and re-run the ones whose worker dies or stalls. Returns ``({slot index: result}, restarts)``."""
        ray, d = self.ray, self.d
        pending: dict = {}  # object ref -> (slot index, deadline, the weights push before it or None)
        tries = [0] * len(self.slots)
        results: dict = {}

        def submit(k: int) -> None:
            slot = self.slots[k]
            push = None
            if slot.version != step:  # the rollout call runs after it on the same actor, and checks the version
                push = slot.actor.load_weights.remote(step, weights)
            ref = getattr(slot.actor, method).options(name=f"{slot.name}.{method}").remote(step, step, shares[k],
                                                                                          *args)
            pending[ref] = (k, time.monotonic() + d.rollout_timeout, push)

        for k, share in enumerate(shares):
            if share:
                submit(k)
        while pending:
            wait_s = max(0.0, min(dl for _, dl, _ in pending.values()) - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
            for ref in ready:
                k, _, push = pending.pop(ref)
                try:
                    results[k] = ray.get(ref)
                    self.slots[k].version = step
                except ray.exceptions.RayTaskError as e:  # our own code raised: a re-run would raise again
                    cause = _push_error(ray, push) or e  # a failed push shows as stale weights: name the cause
                    raise SelfEvolveError(f"{self.slots[k].name} failed on its episodes of step {step}: "
                                          f"{_first_line(cause)}") from e
                except ray.exceptions.RayError as e:  # the actor or its process is gone
                    self._replace(k, f"died ({_first_sentence(e)})", tries, len(shares[k]))
                    submit(k)
            now = time.monotonic()
            for ref, (k, dl, _) in list(pending.items()):
                if dl <= now and ref not in ready:
                    del pending[ref]
                    self._replace(k, f"stalled: no answer within distributed.rollout_timeout={d.rollout_timeout:g}s",
                                  tries, len(shares[k]))
                    submit(k)
        return results, sum(tries)

    def _replace(self, k: int, why: str, tries: list[int], episodes: int) -> None:
        """Kill worker ``k`` and start a fresh one in its place, or fail the step once it used up its restarts."""
        slot = self.slots[k]
        tries[k] += 1
        if tries[k] > self.d.max_restarts:
            self.ray.kill(slot.actor, no_restart=True)  # not left hanging: the next step starts a fresh one
            slot.actor, slot.version = None, None
            raise SelfEvolveError(f"{slot.name} {why}; giving up after {self.d.max_restarts} restart(s) in this "
                                  f"step (distributed.max_restarts)")
        self._warn(f"{slot.name} {why}; restarting it (restart {tries[k]} of at most {self.d.max_restarts}) "
                   f"and re-running its {episodes} episodes")
        self.ray.kill(slot.actor, no_restart=True)
        self._spawn(slot)
        self._await_ready([slot])

    def _warn(self, msg: str) -> None:
        self.events.append(msg)
        log.warning(msg)
        if self.console is not None:
            from rich.markup import escape

            self.console.print(f"[yellow]warning:[/] {escape(msg)}")

    def close(self) -> None:
        """Stop the workers, and the private Ray this run started (a joined cluster keeps running)."""
        for s in self.slots:
            if s.actor is not None:
                try:
                    self.ray.kill(s.actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone, or Ray already shut down
                    pass
                s.actor, s.version = None, None
        if self._owns_ray and self.ray.is_initialized():
            self.ray.shutdown()
            self._owns_ray = False


def _push_error(ray, push) -> BaseException | None:
    if push is None:
        return None
    try:
        ray.get(push, timeout=0)
    except ray.exceptions.RayError as e:
        return e
    return None


def _first_sentence(e: BaseException) -> str:
    """Ray's death notices run to a paragraph; the first sentence says what happened."""
    text = " ".join(str(e).split())
    return text.split(". ")[0][:200] or type(e).__name__


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(e).__name__
