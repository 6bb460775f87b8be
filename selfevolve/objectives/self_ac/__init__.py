"""Self-AC (seed 001, ``algo.name=self_ac``): actor and critic of a whole episode from one forward pass.

Everything of the method is in this folder, and :class:`SelfAcObjective` is what the trainer holds:

- ``shadow.py``: the shadow prompt (critic prompts inserted after every state, hidden from every real token),
  its batch, and its one forward (:func:`~selfevolve.objectives.self_ac.shadow.forward_shadow`);
- ``critic.py``: the math — TD(1..n) critic targets and loss, the actor's advantage A_k = R_k − V(s_k);
- ``update.py``: the optimizer steps (α·critic + (1 − α)·PPO-clip actor), and V of episodes without gradients;
- here: the wiring — the value head the policy carries (``algo.self_ac.value_head``), the critic prompt in the
  model's chat format (also what search appends before reading a state's value), credit to shadow episodes
  (with step labels, their part of the advantage: ``algos/attribution.py``), and the values and advantages
  each trajectory keeps.
"""

from __future__ import annotations

from selfevolve.algos.attribution import label_returns
from selfevolve.objectives.credit import shape_and_filter
from selfevolve.objectives.self_ac.critic import returns_minus_values
from selfevolve.objectives.self_ac.shadow import (ShadowEpisode, build_shadow_episode, check_shadow_attention,
                                                 critic_prompt_ids, final_state_ids)
from selfevolve.objectives.self_ac.update import episode_logprobs, episode_values, self_ac_update
from selfevolve.types import Trajectory


class SelfAcObjective:
    """Credit to shadow episodes and the Self-AC update (see the module docstring)."""

    @staticmethod
    def value_head_kind(cfg) -> str:
        return cfg.algo.self_ac.value_head

    def __init__(self, cfg, policy, builder, optimizer, rng):
        check_shadow_attention(policy)
        self.cfg, self.policy, self.builder, self.optimizer, self.rng = cfg, policy, builder, optimizer, rng
        self.critic_prompt = critic_prompt_ids(policy.tokenizer, builder.eot_id(), cfg.algo.self_ac.critic_prompt)
        self.value_suffix = self.critic_prompt  # V(s) is read after the critic prompt, in search as in the update

    def episode(self, traj: Trajectory, rewards: list[float] | None = None, traj_index: int = 0) -> ShadowEpisode:
        """``traj`` as a shadow-prompt episode (with the final state's critic prompt unless switched off)."""
        final = final_state_ids(traj, self.builder) if self.cfg.algo.self_ac.final_state else None
        return build_shadow_episode(traj, self.critic_prompt, final, rewards=rewards, traj_index=traj_index)

    def credit(self, trajs: list[Trajectory]) -> tuple[list[ShadowEpisode], dict[str, float]]:
        """Rewards (shaped) and filtering as for every objective; then the kept trajectories as shadow episodes
        with their per-turn rewards. The advantages need the values of the update's own forward: they are
        computed there."""
        kept, batch, metrics = shape_and_filter(trajs, self.cfg, self.policy.vocab_size)
        if not kept:
            return [], metrics
        index = {id(t): i for i, t in enumerate(trajs)}
        # step labels (reward.attribution): their part of the advantage, α·Σ_{j≥k} r̃_j, added to A_k in the update
        credit = (batch.per_step(label_returns(batch.step_labels, batch.mask, batch.group_ids,
                                               self.cfg.attribution.alpha))
                  if batch.step_labels is not None else [[] for _ in kept])
        episodes = []
        for t, r, c in zip(kept, batch.per_step(batch.step_rewards), credit):
            if t.steps:
                episodes.append(self.episode(t, rewards=r, traj_index=index[id(t)]))
                episodes[-1].label_credit = c
        return episodes, metrics

    def current_logprobs(self, episodes: list[ShadowEpisode]) -> list[list[float]]:
        """The actor's log-probs of the episodes' action tokens under the current weights (no gradients), one
        list per episode: the same shadow forward as the update's, so a restated ratio starts at 1."""
        return episode_logprobs(self.policy, episodes, self.cfg.algo.micro_batch_tokens)

    def update(self, episodes: list[ShadowEpisode], trajs: list[Trajectory]) -> dict[str, float]:
        """The optimizer steps over ``episodes``; then every trajectory of the step keeps V(s_0..s_n) (the value
        function comes free) and the advantages it was trained with."""
        metrics: dict[str, float] = {}
        if episodes:
            algo = self.cfg.algo
            metrics = self_ac_update(self.policy, self.optimizer, episodes, algo, self.rng)
            for ep in episodes:  # the values of the update's first forward over each episode
                trajs[ep.traj_index].values = [round(v, 5) for v in ep.values]
                trajs[ep.traj_index].advantages = returns_minus_values(ep.rewards, ep.values, algo.gamma,
                                                                       ep.label_credit)
        self.record_values(trajs)
        return metrics

    def record_values(self, trajs: list[Trajectory]) -> None:
        """V(s_0..s_n) of the trajectories the update did not see (dropped by filtering), without gradients, so
        that every logged trajectory carries its values."""
        todo = [t for t in trajs if t.values is None and t.steps]
        if not todo:
            return
        eps = [self.episode(t) for t in todo]
        for t, vals in zip(todo, episode_values(self.policy, eps, self.cfg.algo.micro_batch_tokens)):
            t.values = [round(v, 5) for v in vals]
