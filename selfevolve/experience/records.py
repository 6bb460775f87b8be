"""Trajectories as pool rows: the text that is embedded, the tool sequence, the few-shot turns.

One text format serves both sides of SEER's similarity, so that a history H_t and a stored trajectory τ' are
embedded alike: the request, then each action and the world's answer (``agent/transcript.py``).
"""

from __future__ import annotations

from selfevolve.agent.parsing import parse_action
from selfevolve.agent.transcript import history_text
from selfevolve.experience.pool import NewItem
from selfevolve.types import Step, Trajectory


def tool_sequence(steps: list[Step]) -> list[str]:
    """U: the names of the tools called without a format error, in order (empty in worlds without tools)."""
    out = []
    for s in steps:
        call = s.info.get("tool_call")
        if s.valid and isinstance(call, dict) and call.get("name"):
            out.append(str(call["name"]))
    return out


def example_turns(query: str, steps: list[Step]) -> list[tuple[str, str]]:
    """The episode as few-shot (observation, action) turns. Invalid actions are left out: they change nothing
    in the world, so the next action follows the same observation, and an example should not teach a
    malformed reply."""
    turns, obs = [], query
    for s in steps:
        if s.valid:
            turns.append((obs, parse_action(s.action_text)))
            obs = s.observation
    return turns


def trajectory_item(traj: Trajectory, query: str, intent: str | None, env: str = "") -> NewItem:
    return NewItem(kind="trajectory", text=history_text(query, traj.steps), key_text=query, intent=intent,
                   tools=tool_sequence(traj.steps), turns=example_turns(query, traj.steps), score=traj.reward,
                   success=traj.success, task_id=traj.task.id, env=env or traj.task.env,
                   info={"group": traj.group_id, "turns": len(traj.steps)})
