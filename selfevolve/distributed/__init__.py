"""Scaling out: training rollouts on Ray workers (``distributed.backend=ray``, docs/scaling.md).

``worker.py``: the worker actor (a policy replica and a pool of environments); ``ray_rollout.py``: the driver's
side (starting workers, pushing weights, splitting groups, deadlines and restarts). Ray is imported only when
the backend is used.
"""
