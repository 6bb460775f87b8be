"""Where a training step's sampled rollouts run (``distributed.backend``): in this process, or on Ray workers
(``distributed.backend=ray``, docs/scaling.md).

``worker.py``: the worker actor (a policy replica and a pool of environments); ``ray_rollout.py``: the driver's
side (starting workers, pushing weights, splitting groups, deadlines and restarts). Ray is imported only when
the backend is used.
"""

from __future__ import annotations

from selfevolve.rollout.collect import LocalRollouts


def make_rollouts(cfg, env_cls, env_options: dict, builder, experience=None, console=None, pool=None):
    """The collector of ``cfg.distributed.backend``: :class:`LocalRollouts` or ``RayRollouts`` (both
    ``collect(policy, tasks, step) -> (trajectories, stats, metrics)`` and ``close()``). ``pool``: where local
    rollouts take their environments (an ``EnvPool``, the trainer's, which it closes); Ray workers make their own."""
    if cfg.distributed.backend == "ray":
        from selfevolve.distributed.ray_rollout import RayRollouts

        return RayRollouts(cfg, env_cls, env_options, console=console, experience=experience)
    return LocalRollouts(cfg, env_cls, env_options, builder, experience, pool=pool)
