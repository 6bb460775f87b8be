"""The Ray rollout backend (distributed.backend=ray) on the tiny model, with 2 local workers.

One small Ray (2 CPUs, no dashboard) serves the whole module and is shut down at its end. The workers are real
Ray actors in their own processes; the tests compare them with the local path, kill one mid-step and stall one.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

from selfevolve.config import load_config
from selfevolve.errors import ConfigError, SelfEvolveError
from selfevolve.envs.pool import EnvPool
from selfevolve.rollout.collect import play_searches, step_episodes
from selfevolve.train.trainer import Trainer
from conftest import invoke

ray = pytest.importorskip("ray")

BASE = ["model.name=tiny", "model.dtype=fp32", "env.name=frozenlake", "env.max_turns=3", "algo.group_size=2",
        "train.tasks_per_step=3", "train.warm_start_steps=0", "eval.at_start=false", "eval.episodes=1",
        "train.progress=false", "train.log_trajectories=false", "algo.lr=0.02"]
RAY = ["distributed.backend=ray", "distributed.workers=2", "distributed.start_timeout=600"]  # minutes on a loaded 2-core CPU


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    ray.shutdown()


def _trainer(tmp_path, name, extra=()):
    cfg = load_config(overrides=[*BASE, *extra, f"train.out_dir={tmp_path / name}"])
    return Trainer(cfg)


def _same(a, b, logprob_tol=1e-4):
    """Same episodes: groups, tasks, token ids, rewards, versions exact; log-probs to float noise (a batch of
    other size takes other BLAS kernels: the last digits of a row's logits depend on the batch size)."""
    assert [t.group_id for t in a] == [t.group_id for t in b]
    for x, y in zip(a, b):
        assert x.task == y.task and x.policy_version == y.policy_version
        assert [s.prompt_ids for s in x.steps] == [s.prompt_ids for s in y.steps]
        assert [s.action_ids for s in x.steps] == [s.action_ids for s in y.steps]
        assert [s.reward for s in x.steps] == [s.reward for s in y.steps] and x.success == y.success
        for s, r in zip(x.steps, y.steps):
            assert max((abs(p - q) for p, q in zip(s.logprobs, r.logprobs)), default=0.0) <= logprob_tol


@pytest.fixture(scope="module")
def ray_trainer(ray_session, tmp_path_factory):
    trainer = _trainer(tmp_path_factory.mktemp("ray"), "run", RAY)
    yield trainer
    trainer.close()


def _perturb(policy, seed: int) -> None:
    """Move the adapter as an update would (LoRA B starts at 0, and a tiny model's first groups often have
    no reward spread, so a real update can leave it unchanged)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)


def _diff(a, b) -> float:
    return max(abs(p - q) for x, y in zip(a, b) for s, r in zip(x.steps, y.steps)
               for p, q in zip(s.logprobs, r.logprobs))


def test_two_workers_equal_local_and_carry_the_pushed_version(ray_trainer, tmp_path):
    local = _trainer(tmp_path, "local")
    initial = local.policy.adapter_state()
    a0, _ = local.collect()
    b0, _ = ray_trainer.collect()
    _same(a0, b0)
    assert len({t.group_id for t in b0}) == 3 and len(b0) == 6 and {t.policy_version for t in b0} == {0}
    for tr in (local, ray_trainer):  # an update, then the next step: the driver pushes version 1
        _perturb(tr.policy, seed=7)
        tr.step = 1
    cursor = local.tasks.cursor
    a1, _ = local.collect()
    b1, _ = ray_trainer.collect()
    _same(a1, b1)
    assert {t.policy_version for t in b1} == {1}
    assert [s.version for s in ray_trainer.rollouts.slots] == [1, 1]
    # ... and the new weights matter: the old adapter samples step 1 with other log-probs
    local.policy.load_adapter_state(initial)
    local.tasks.cursor = cursor
    stale, _ = local.collect()
    assert _diff(stale, b1) > 1e-3


def test_a_worker_refuses_to_sample_with_weights_it_was_not_pushed(ray_trainer):
    slot = ray_trainer.rollouts.slots[0]
    with pytest.raises(ray.exceptions.RayTaskError, match="rollout-worker-0 holds weights version"):
        ray.get(slot.actor.rollout.remote(slot.version + 5, 0, []), timeout=60)


def test_killed_worker_is_restarted_and_the_step_has_the_same_groups(ray_trainer):
    tr = ray_trainer
    cursor = tr.tasks.cursor
    before, _ = tr.collect()
    tr.tasks.cursor = cursor  # the same step again, now with a worker killed in the middle of it
    victim = tr.rollouts.slots[1]
    ray.get(victim.actor.stall.remote(30), timeout=60)  # so that it is surely mid-rollout when killed
    pid = victim.info["pid"]
    threading.Timer(2.0, os.kill, (pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    after, _ = tr.collect()
    # no wait for distributed.rollout_timeout (900 s): the death is seen at once; the restart itself (a new
    # process importing torch and loading the model) took 234 s on this CPU with four other jobs on it
    assert time.monotonic() - t0 < 600
    _same(before, after, logprob_tol=0.0)  # the restarted worker re-runs exactly the same share
    assert victim.info["pid"] != pid
    assert any(e.startswith("rollout-worker-1 died") and "re-running its 4 episodes" in e for e in tr.rollouts.events)


def test_stalled_worker_is_reported_by_name_then_restarted(ray_trainer):
    tr, d = ray_trainer, ray_trainer.cfg.distributed
    # long enough for a healthy worker's rollout on a loaded CPU (4 s was not: the healthy worker 'stalled' too)
    d.rollout_timeout, d.max_restarts = 30.0, 0
    try:
        ray.get(tr.rollouts.slots[0].actor.stall.remote(600), timeout=60)
        t0 = time.monotonic()
        with pytest.raises(SelfEvolveError, match=r"rollout-worker-0 stalled: no answer within "
                                                  r"distributed.rollout_timeout=30s; giving up after 0 restart"):
            tr.collect()
        assert time.monotonic() - t0 < 300  # no hang: the stall lasts 600 s
        d.max_restarts = 1  # the given-up worker was stopped; it starts again, stalls, and is restarted
        tr.rollouts.start(tr.policy)
        ray.get(tr.rollouts.slots[0].actor.stall.remote(600), timeout=60)
        trajs, _ = tr.collect()
        assert len(trajs) == 6
        assert any(e.startswith("rollout-worker-0 stalled") and "restarting it" in e for e in tr.rollouts.events)
    finally:
        d.rollout_timeout, d.max_restarts = 900.0, 2


def test_more_workers_than_cpus_is_refused(ray_session, tmp_path):
    tr = _trainer(tmp_path, "over", [*RAY, "distributed.workers=3"])
    with pytest.raises(ConfigError, match=r"distributed.workers=3 x distributed.worker_cpus=1 = 3 CPUs, but the "
                                          r"Ray cluster has 2"):
        tr.collect()
    tr.close()


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(ConfigError, match="distributed.backend: Input should be 'local' or 'ray'"):
        load_config(overrides=["distributed.backend=spark"])


def test_cli_trains_self_ac_on_ray_workers(ray_trainer, tmp_path):
    """End to end through the command line, with a value head on the driver only (Self-AC)."""
    ray_trainer.close()  # its workers hold both CPUs of this Ray
    code, err, out = invoke("train", *BASE, *RAY, "algo.name=self_ac", "train.steps=2",
                            f"train.out_dir={tmp_path / 'cli'}")
    assert code == 0, (err, out)
    assert (tmp_path / "cli" / "checkpoints" / "step-2").is_dir()


def test_search_on_two_workers_equals_the_searches_played_in_one_batch(ray_trainer, tmp_path):
    """Beam search on Ray, scored with the value head (pushed with the adapter): each search draws from its own
    stream, so the 2 workers' shares give the searches of one batch played in this process; then a tiny run."""
    ray_trainer.close()  # its workers hold both CPUs of this Ray
    tr = _trainer(tmp_path, "beam", [*RAY, "rollout.search=beam", "search.m=2", "search.beams=2", "algo.name=ppo",
                                     "search.scorer=weighted", "search.w_value=0.5", "train.steps=1"])
    _perturb(tr.policy, seed=3)
    with torch.no_grad():  # a head that reads something (it starts at V = 0)
        for p in tr.policy.value_head.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(4)) * 0.1)
    tasks = tr.tasks.next(3)
    result, metrics = tr.rollouts.search(tr.policy, tasks, 0, tr.search, max_turns=3, critic_suffix=[])
    assert metrics["distributed/workers_busy"] == 2 and len(result.trajectories) == 6 and len(result.trees) == 6
    ref = play_searches(tr.policy, tr.builder, step_episodes(tasks, 2, 0), tr.search, run_seed=tr.cfg.seed, step=0,
                        version=0, max_turns=3, critic_suffix=[], pool=EnvPool(tr.env_cls, tr.env_options))
    _same(result.trajectories, ref.trajectories)
    assert [t.search["tree"] for t in result.trajectories] == list(range(6))  # trees numbered across the shares
    for a, b in zip(result.trees, ref.trees):
        assert [n["action"] for n in a["nodes"]] == [n["action"] for n in b["nodes"]]
        assert [n.get("value") for n in a["nodes"]] == pytest.approx([n.get("value") for n in b["nodes"]], abs=1e-4)
    assert any(n.get("value") for t in result.trees for n in t["nodes"])  # the workers read the pushed head
    assert result.stats.candidates == ref.stats.candidates and result.stats.new_tokens == ref.stats.new_tokens
    final = tr.train()  # one step of the run on the workers
    assert final["search/compute_multiple"] > 1 and final["distributed/workers_busy"] == 2
    tr.close()


def _pool_file(path):
    """A pool with two expert FrozenLake episodes (SEER's examples) and two insights (self-navigating's block)."""
    from selfevolve.envs import ENVS
    from selfevolve.experience.embed import Embedder
    from selfevolve.experience.guide import seed_items
    from selfevolve.experience.pool import ExperiencePool, NewItem

    pool = ExperiencePool(path, Embedder(load_config().experience.embedder))
    pool.add([*seed_items(ENVS["frozenlake"], {}, 2, "frozenlake"),
              NewItem(kind="insight", text="Move towards the goal and away from holes.", key_text="a frozen lake"),
              NewItem(kind="insight", text="Never walk into the edge of the map.", key_text="moving on a grid")],
             step=0, origin="seed")
    pool.close()
    return path


def test_experience_on_two_workers_equals_local(ray_trainer, tmp_path):
    """SEER recall and self-navigating on the workers: the driver sends its pool and the recall's seed; the step's
    episodes are the local backend's (one example recalled, so no shuffle order to differ). Then search on the
    workers, guided the same way, for a tiny run."""
    ray_trainer.close()  # its workers hold both CPUs of this Ray
    pool = _pool_file(tmp_path / "pool.sqlite")
    extra = ["experience.recall=seer", "experience.k=1", "experience.navigate=true", f"experience.pool={pool}",
             "experience.llm_max_new_tokens=8", "train.steps=1"]
    local, remote = _trainer(tmp_path, "local", extra), _trainer(tmp_path, "remote", [*RAY, *extra])
    a, _ = local.collect()
    b, _ = remote.collect()
    _same(a, b)
    assert [t.guided for t in b] == [t.guided for t in a] == [True, False] * 3
    assert [[s.info["recalled"] for s in t.steps] for t in b] == [[s.info["recalled"] for s in t.steps] for t in a]
    assert [[s.train_prompt_ids for s in t.steps] for t in b] == [[s.train_prompt_ids for s in t.steps] for t in a]
    assert remote.search_metrics["experience/recall_s_per_turn"] > 0
    local.close()
    remote.close()
    searched = _trainer(tmp_path, "beam", [*RAY, *extra, "rollout.search=beam", "search.m=2",
                                           "train.log_trajectories=true"])
    final = searched.train()
    assert final["experience/guided_share"] == 0.5 and final["experience/recalled_per_turn"] == 1
    assert final["search/compute_multiple"] > 1 and final["distributed/workers_busy"] == 2
