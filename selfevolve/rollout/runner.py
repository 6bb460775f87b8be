"""Batched multi-turn rollouts: many environments stepped in lockstep, one generation call per turn.

Each turn, every environment still running contributes one prompt; the sampler (``models/sampler.py``) answers
them all in one batched call; each environment steps on its own answer. Environments that finish leave the batch, so no generation is
spent on them. Every step keeps the exact prompt ids the model saw and the ids it produced, with their old
log-probs and uncertainty statistics (token-in, token-out).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

from selfevolve.agent.context import EpisodeContext
from selfevolve.agent.parsing import parse_action
from selfevolve.agent.prompt import PromptBuilder
from selfevolve.envs.base import TextEnv
from selfevolve.envs.holdout import content_digest
from selfevolve.models.sampler import Sampler, Stream
from selfevolve.types import Step, Task, Trajectory


@dataclass
class RolloutStats:
    seconds: float = 0.0
    prompt_tokens: int = 0
    new_tokens: int = 0
    generate_calls: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def request_of(env, first: str) -> tuple[str, str]:
    """What a judge (or a reader) needs to know of an episode's task, ``(query, reference)``: the request as the
    model first saw it, and the world's reference solution where it has one ("" where not)."""
    reference = env.reference_text() if callable(getattr(env, "reference_text", None)) else ""
    return first, reference or ""


def rollout(
    policy: Sampler,
    envs: list[TextEnv],
    tasks: list[Task],
    builder: PromptBuilder,
    *,
    max_turns: int,
    group_ids: list[str] | None = None,
    greedy: bool = False,
    generator: Stream | list[Stream] | None = None,
    stats: RolloutStats | None = None,
    reuse_cache: bool = True,
    guide=None,
) -> list[Trajectory]:
    """Play ``tasks[i]`` in ``envs[i]`` for at most ``max_turns`` turns; return one trajectory per task.

    ``reuse_cache``: hand the sampler's state of each episode (its key/value cache) from turn to turn (exact; only
    new tokens are encoded when the prompt extends the previous one, as the full-history chat does).
    ``guide``: the experience pool's hook (``selfevolve/experience/guide.py``): ``start`` gives each episode its
    guidance (insight block, guided or not), ``before_turn`` recalls examples for the active episodes (SEER).
    ``generator``: one random stream of the sampler for all episodes, or a list with one per episode
    (``rollout/seeding.py``: an episode's samples then do not depend on the batch it is played in).
    """
    assert len(envs) == len(tasks)
    t0 = time.perf_counter()
    trajs = [Trajectory(task=t, group_id=(group_ids[i] if group_ids else t.id)) for i, t in enumerate(tasks)]
    firsts = [env.reset(task.seed) for env, task in zip(envs, tasks)]
    for t, env, first in zip(trajs, envs, firsts):
        t.query, t.reference = request_of(env, first)
        t.task.content = content_digest(env)  # what the run has seen (held-out checks, envs/holdout.py)
    guidance = guide.start(trajs, firsts, envs) if guide is not None else [None] * len(tasks)
    contexts = [EpisodeContext(builder, task.instruction, first, g)
                for task, first, g in zip(tasks, firsts, guidance)]
    active = list(range(len(tasks)))
    kv = None  # the caches of the active rows, carried from turn to turn
    for turn in range(max_turns):
        if not active:
            break
        if guide is not None:
            guide.before_turn(turn, [contexts[i] for i in active], [trajs[i] for i in active])
        due = [i for i in active if contexts[i].pending]
        _context_calls(policy, [contexts[i] for i in due], greedy, _rows(generator, due), stats)
        prefixes = [reply_prefix(envs[i]) for i in active]
        prefix_ids = [policy.encode(p) if p else [] for p in prefixes]
        prompts = [contexts[i].prompt + prefix_ids[k] for k, i in enumerate(active)]
        gen = policy.generate(prompts, greedy=greedy, generator=_rows(generator, active), state=kv)
        if stats is not None:
            stats.prompt_tokens += gen.prompt_tokens
            stats.new_tokens += gen.new_tokens
            stats.generate_calls += 1
        still = []
        for k, i in enumerate(active):
            text = prefixes[k] + policy.decode(gen.ids[k])
            step = play(envs[i], text, gen, k, prompts[k], last_turn=turn == max_turns - 1,
                        calls=contexts[i].take_calls())
            train_prompt = contexts[i].train_prompt
            step.train_prompt_ids = None if train_prompt is None else train_prompt + prefix_ids[k]
            if contexts[i].recalled is not None:
                step.info["recalled"] = list(contexts[i].recalled)
            trajs[i].steps.append(step)
            trajs[i].success = bool(step.info.get("success", False))
            if not step.done:
                still.append(i)
                contexts[i].advance(prefix_ids[k] + gen.ids[k], text, step.observation)
        if still and gen.state is not None and reuse_cache:
            keep = set(still)
            kv = gen.state.select([k for k, i in enumerate(active) if i in keep])
        active = still
    if stats is not None:
        stats.seconds += time.perf_counter() - t0
    return trajs


def reply_prefix(env) -> str:
    """The text ``env`` wants its next reply to start with (``TextEnv.reply_prefix``; "" for environments
    without the method). Its tokens become the end of the step's prompt: the step's action ids, log-probs and
    uncertainty are the model's own tokens only, and its action text is the prefix plus them."""
    get = getattr(env, "reply_prefix", None)
    return get() if callable(get) else ""


def _rows(generator, rows: list[int]):
    """The generators of episodes ``rows`` when there is one per episode; else the shared one."""
    return [generator[i] for i in rows] if isinstance(generator, (list, tuple)) else generator


def play(env: TextEnv, text: str, gen, k: int, prompt: list[int], *, last_turn: bool, calls: list) -> Step:
    """Step ``env`` on reply ``k`` of generation ``gen`` (decoded as ``text``) and record the turn. ``done`` of
    the step is also set when the turn limit cuts the episode (``info["truncated"]``)."""
    key = env.state_key()
    try:
        obs, reward, done, info = env.step(parse_action(text))
    except Exception as e:  # noqa: BLE001 - a buggy environment must not take the whole run down
        _warn_env_error(env, e)
        obs, reward, done, info = f"[environment error: {e}]", 0.0, True, {
            "success": False, "valid_action": False, "env_error": repr(e)}
    truncated = not done and last_turn
    return Step(
        prompt_ids=prompt,
        action_ids=gen.ids[k],
        logprobs=gen.logprobs[k],
        entropy=gen.entropy[k],
        top1=gen.top1[k],
        top2=gen.top2[k],
        action_text=text,
        observation=obs,
        reward=float(reward),
        done=bool(done or truncated),
        valid=bool(info.get("valid_action", True)),
        state_key=str(key),
        info={k2: v for k2, v in info.items() if _jsonable(v)} | {"truncated": truncated},
        calls=calls,
    )


def _context_calls(policy, due: list[EpisodeContext], greedy, generator, stats) -> None:
    """One batched model call for the episodes whose self-managed context is over budget (see
    agent/context.py); each answer is applied, and the call recorded for the next step."""
    if not due:
        return
    prompts = [c.call_prompt() for c in due]
    gen = policy.generate(prompts, greedy=greedy, generator=generator, max_new_tokens=due[0].spec.call_tokens)
    if stats is not None:
        stats.prompt_tokens += gen.prompt_tokens
        stats.new_tokens += gen.new_tokens
        stats.generate_calls += 1
    for k, c in enumerate(due):
        c.resolve(policy.decode(gen.ids[k]), {"prompt_ids": prompts[k], "action_ids": gen.ids[k],
                                              "logprobs": gen.logprobs[k]})


_warned: set[str] = set()


def _warn_env_error(env, e: Exception) -> None:
    name = type(env).__name__
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"{name}.step raised {e!r}; the episode ends there (info['env_error']). Environments should "
                      f"answer bad actions with an error observation instead of raising.", stacklevel=3)


def _jsonable(v) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), list, dict))
