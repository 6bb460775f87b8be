"""Beam and lookahead search, stepped in lockstep over a batch of searches (``rollout.search=beam|lookahead``).

- ``beam``: per turn, every live beam samples M candidate actions; each child (action + the world's answer)
  is scored, and the B best children of a search (finished beams compete too) are kept:
  B_{t+1} = Top_B {τ_<t ∘ a_t | τ_<t ∈ B_t, a_t ∈ A_t}.
- ``lookahead``: the same beam, but a child's score is that of the state reached after D more policy turns
  from it (one sampled continuation, discarded afterwards).

Everything is batched: each turn, the candidates of every search go through one generation call. Environments
branch by ``snapshot``/``restore`` (one scratch environment per search), or by replaying the moves from the seed
for a world that cannot be copied (``envs/replay.py``). Shared prefixes are never re-encoded:
a child starts from a copy of its parent's key/value cache (``SamplerState.gather``), so each turn encodes only the
new observation tokens, for every candidate and every lookahead continuation.

Experience (``guide``, ``selfevolve/experience/guide.py``) guides a search as it guides sampled episodes: a search
is guided or not as a whole (self-navigating's insight block in every node's prompt; trained on the twin prompt
without it), and SEER recalls before every expansion from the node's own history, lookahead continuations
included — every prompt the search samples from carries the recall it would have had as a sampled episode.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace

from selfevolve.agent.context import EpisodeContext
from selfevolve.agent.parsing import parse_action
from selfevolve.envs.base import TextEnv
from selfevolve.envs.holdout import content_digest
from selfevolve.envs.replay import restore_snapshot, take_snapshot
from selfevolve.models.sampler import SamplerState
from selfevolve.rollout.runner import _context_calls, play, request_of
from selfevolve.rollout.search.scoring import Node, score, top
from selfevolve.rollout.search.spec import SearchResult, SearchStats
from selfevolve.types import Step, Trajectory


def reply_prefix_of(env):
    """``env``'s own ``reply_prefix`` method when its class overrides ``TextEnv.reply_prefix``, else None."""
    method = getattr(type(env), "reply_prefix", None)
    return None if method is None or method is TextEnv.reply_prefix else method


class _Searcher:
    """One batch of searches (one per task given), stepped in lockstep."""

    def __init__(self, policy, envs, tasks, builder, spec, max_turns, generator, rng, critic_suffix, greedy=False,
                 guide=None):
        self.policy, self.envs, self.tasks, self.builder, self.guide = policy, envs, tasks, builder, guide
        self.spec, self.max_turns, self.generator, self.rng = spec, max_turns, generator, rng
        self.suffix, self.greedy = list(critic_suffix or []), greedy
        self.stats = SearchStats()
        self.tree: list[list[dict]] = [[] for _ in tasks]
        self.records: dict[int, dict] = {}  # node id -> its entry in ``tree``
        self.next_id = 0
        prefixed = sorted({type(e).__name__ for e in envs if reply_prefix_of(e) is not None})
        if prefixed:  # refused rather than ignored: the replies would not start as the environment asks
            raise ValueError(f"beam and lookahead search do not apply reply prefixes (TextEnv.reply_prefix); "
                             f"{', '.join(prefixed)} sets one: use rollout.search=sample or best_of_n")
        if spec.needs_value and not policy.has_values:
            raise ValueError("search.scorer uses the value head, but the policy has none (algo.name=self_ac or ppo)")

    # ---- nodes ------------------------------------------------------------------------------------------------
    def new_node(self, parent: Node | None, search: int, env: TextEnv, context: EpisodeContext, steps: list[Step],
                 turn: int, record: bool = True) -> Node:
        last = steps[-1] if steps else None
        info = last.info if last else {}
        done = bool(last.done) if last else False
        # the world's own snapshot, or a replay of the moves when it cannot be copied (envs/replay.py)
        snap = take_snapshot(env, self.tasks[search].seed, [parse_action(s.action_text) for s in steps])
        node = Node(self.next_id, parent.id if parent else None, search, snap, context, steps, done=done,
                    failed=done and not info.get("truncated", False) and not info.get("success", False),
                    success=bool(info.get("success", False)), progress=float(env.progress()))
        self.next_id += 1
        if record:
            rec = {"id": node.id, "parent": node.parent, "turn": turn,
                   "action": last.action_text if last else None,
                   "observation": last.observation if last else context.observations[0],
                   "valid": last.valid if last else True, "reward": last.reward if last else 0.0, "done": done,
                   "failed": node.failed, "success": node.success}
            self.tree[search].append(rec)
            self.records[node.id] = rec
        return node

    def roots(self) -> list[Node]:
        # per search: what the kept trajectories inherit — the request (query, reference) and the experience's
        # marks (intents, guided, insights)
        self.heads: list[Trajectory] = []
        firsts = []
        for env, task in zip(self.envs, self.tasks):  # one scratch environment per search
            firsts.append(env.reset(task.seed))
            query, reference = request_of(env, firsts[-1])
            self.heads.append(Trajectory(task=task, query=query, reference=reference))
            task.content = content_digest(env)  # what the run has seen (held-out checks, envs/holdout.py)
        guidance = self.guide.start(self.heads, firsts, self.envs) if self.guide is not None else [None] * len(firsts)
        return [self.new_node(None, s, env, EpisodeContext(self.builder, task.instruction, first, g), [], turn=0)
                for s, (env, task, first, g) in enumerate(zip(self.envs, self.tasks, firsts, guidance))]

    def recall(self, parents: list[Node], turn: int) -> None:
        """SEER: every parent's examples recalled from its own history before it is expanded."""
        if self.guide is None:
            return
        views = [Trajectory(task=self.tasks[p.search], steps=p.steps, query=self.heads[p.search].query,
                            intent=self.heads[p.search].intent) for p in parents]
        self.guide.before_turn(turn, [p.context for p in parents], views)

    # ---- one turn ---------------------------------------------------------------------------------------------
    def expand(self, parents: list[Node], m: int, state: SamplerState | None, turn: int, record: bool = True):
        """Sample ``m`` actions for every parent in one generation call and step each in its own branch.

        Returns ``(children, state)``: ``child.row`` is the child's row in the returned cache state. ``state``
        (rows: the parents' ``row``) is consumed. With m > 1 each parent's new tokens are encoded once and its
        cache copied to its m candidates; the state returned is then the parents' (``prompt[:-1]``), which every
        child's next prompt extends: the candidates' own caches are dropped right after sampling (memory peaks
        at one copy per candidate, not two), and a kept child re-encodes only its few action tokens next turn.
        """
        self.recall(parents, turn)  # (a prompt that changed is encoded afresh: its cache no longer extends)
        due = [p for p in parents if p.context.pending]
        _context_calls(self.policy, [p.context for p in due], self.greedy, self.streams(due), self.stats)
        rows = [i for i in range(len(parents)) for _ in range(m)]
        kv = base = None
        if self.spec.reuse_cache and state is not None:
            own = [p.row for p in parents]
            kv = state if own == list(range(len(state.seqs))) else state.gather(own)
        if self.spec.reuse_cache and m > 1:
            base, encoded = self.policy.prefill([p.context.prompt for p in parents], kv, self.spec.share_prefix)
            self.stats.prompt_tokens += encoded
            kv = base.gather(rows)
        prompts = [parents[i].context.prompt for i in rows]
        gen = self.policy.generate(prompts, greedy=self.greedy, generator=self.streams([parents[i] for i in rows]),
                                   state=kv,
                                   share_prefix=self.spec.share_prefix)
        del kv
        self.count(gen)
        children = []
        for k, i in enumerate(rows):
            parent = parents[i]
            env = self.envs[parent.search]
            restore_snapshot(env, parent.snapshot)
            text = self.policy.decode(gen.ids[k])
            step = play(env, text, gen, k, prompts[k], last_turn=turn == self.max_turns - 1,
                        calls=list(parent.context.calls))
            train_prompt = parent.context.train_prompt  # the prompt without an insight block (self-navigating)
            step.train_prompt_ids = None if train_prompt is None else list(train_prompt)
            if parent.context.recalled is not None:
                step.info["recalled"] = list(parent.context.recalled)
            ctx = parent.context.fork()
            ctx.calls = []
            if not step.done:
                ctx.advance(gen.ids[k], text, step.observation)
            child = self.new_node(parent, parent.search, env, ctx, parent.steps + [step], turn + 1, record)
            child.row = i if base is not None else k
            children.append(child)
        for p in parents:
            p.context.calls = []
        if base is not None:
            gen.state = None  # the candidates' caches: not needed any more
            return children, base
        return children, gen.state if self.spec.reuse_cache else None

    def streams(self, nodes: list[Node]):
        """The random stream(s) of a generation over ``nodes``: the batch's one, or each node's search's own."""
        return [self.generator[n.search] for n in nodes] if isinstance(self.generator, list) else self.generator

    def tie_rng(self, search: int) -> random.Random:
        return self.rng[search] if isinstance(self.rng, list) else self.rng

    def count(self, gen) -> None:
        self.stats.prompt_tokens += gen.prompt_tokens
        self.stats.new_tokens += gen.new_tokens
        self.stats.generate_calls += 1

    def read_values(self, nodes: list[Node], state: SamplerState | None) -> SamplerState | None:
        """Set ``value`` of every live node (one batched forward); returns a cache state of the live nodes
        (in order, rows renumbered) that their next generation continues from."""
        live = [n for n in nodes if not n.done]
        if not live:
            return None
        kv = state.gather([n.row for n in live]) if state is not None and self.spec.reuse_cache else None
        prompts = [n.context.prompt for n in live]
        values, new_state, encoded = self.policy.state_values(prompts, self.suffix, kv)
        self.stats.prompt_tokens += encoded
        for r, (n, v) in enumerate(zip(live, values)):
            n.value, n.row = float(v), r
        return new_state

    def evaluate(self, children: list[Node], state: SamplerState | None, turn: int) -> SamplerState | None:
        """Score every child (lookahead: after ``depth`` more turns). Returns the cache state for the live ones."""
        if self.spec.name == "lookahead":
            self.look_ahead(children, state, turn)
        elif self.spec.needs_value:
            state = self.read_values(children, state)
        for c in children:
            if self.spec.name != "lookahead":
                c.score = score(c, self.spec)
            rec = self.records.get(c.id)
            if rec is not None:
                rec.update(score=round(c.score, 5), progress=round(c.progress, 5))
                if self.spec.needs_value:
                    rec["value"] = round(c.value, 5)
                if c.lookahead is not None:
                    rec["lookahead"] = c.lookahead
        return state

    def look_ahead(self, children: list[Node], state: SamplerState | None, turn: int) -> None:
        """Roll ``depth`` more policy turns from each live child (one continuation each, discarded afterwards)
        and give the child the score of the state reached."""
        frontier = [c for c in children if not c.done]
        leaves = {c.id: c for c in children}
        sims = []
        for c in frontier:  # a copy of the child that can move on without changing it
            sim = Node(c.id, c.parent, c.search, c.snapshot, c.context.fork(), list(c.steps), progress=c.progress)
            sim.row = c.row
            sims.append(sim)
        kv = state.gather([s.row for s in sims]) if state is not None and sims and self.spec.reuse_cache else None
        for i, s in enumerate(sims):
            s.row = i
        t = turn + 1
        for _ in range(self.spec.depth):
            live = [s for s in sims if not s.done]
            if not live or t >= self.max_turns:
                break
            before = self.stats.new_tokens
            nxt, kv_next = self.expand(live, 1, kv, t, record=False)
            self.stats.lookahead_tokens += self.stats.new_tokens - before
            for s, n in zip(live, nxt):  # keep the child's identity: only its state moves on
                s.snapshot, s.context, s.steps, s.done = n.snapshot, n.context, n.steps, n.done
                s.failed, s.success, s.progress, s.row = n.failed, n.success, n.progress, n.row
            kv = kv_next
            still = [s for s in live if not s.done]
            if still and kv is not None:
                kv = kv.gather([s.row for s in still])
                for r, s in enumerate(still):
                    s.row = r
            t += 1
        if self.spec.needs_value:
            self.read_values(sims, kv)
        for c in children:
            c.score = score(c, self.spec)  # finished children: their own state is final
        for s in sims:
            c = leaves[s.id]
            c.score = score(s, self.spec)
            c.lookahead = {"turns": len(s.steps) - len(c.steps), "reward": round(s.reward, 5),
                           "success": s.success, "score": round(c.score, 5)}

    # ---- strategies -------------------------------------------------------------------------------------------
    def beam(self) -> list[list[Node]]:
        spec = self.spec
        roots = self.roots()
        state = self.read_values(roots, None) if spec.needs_value else None
        beams = [[r] for r in roots]
        for turn in range(self.max_turns):
            live = [n for b in beams for n in b if not n.done]
            if not live:
                break
            children, state = self.expand(live, spec.m, state, turn)
            self.stats.candidates += len(children)
            state = self.evaluate(children, state, turn)
            by_search: dict[int, list[Node]] = {}
            for c in children:
                by_search.setdefault(c.search, []).append(c)
            for s, kids in by_search.items():
                beams[s] = top([n for n in beams[s] if n.done] + kids, spec.beams, self.tie_rng(s))
            for b in beams:
                for n in b:
                    self.records[n.id].setdefault("beam_turns", []).append(turn + 1)
            live = [n for b in beams for n in b if not n.done]
            state = state.gather([n.row for n in live]) if state is not None and live else None
            for r, n in enumerate(live):
                n.row = r
        return [top(b, len(b), self.tie_rng(s)) for s, b in enumerate(beams)]


def beam_search(policy, make_env, tasks, builder, spec, max_turns, gid, generator, rng, critic_suffix, greedy, guide,
                t0) -> SearchResult:
    """Beam or lookahead search, one per ``tasks[i]`` (one scratch environment each); keep the
    ``spec.kept_per_search()`` best final beams of each and mark their paths in its tree."""
    searcher = _Searcher(policy, [make_env() for _ in tasks], tasks, builder, spec, max_turns, generator, rng,
                         critic_suffix, greedy, guide)
    final = searcher.beam()
    kept: list[Trajectory] = []
    for s, nodes in enumerate(final):
        chosen = nodes[: spec.kept_per_search()]
        for n in chosen:
            head = searcher.heads[s]
            kept.append(replace(head, steps=n.steps, group_id=gid(s), success=n.success, insights=list(head.insights),
                                search={"strategy": spec.name, "tree": s, "node": n.id, "score": round(n.score, 5)}))
            for i in _path_ids(searcher.tree[s], n.id):
                searcher.records[i]["kept"] = True
    searcher.stats.seconds = time.perf_counter() - t0
    trees = [{"task": tasks[s].id, "strategy": spec.name, "scorer": spec.scorer, "nodes": searcher.tree[s]}
             for s in range(len(tasks))]
    return SearchResult(kept, trees, searcher.stats)


def _path_ids(nodes: list[dict], leaf: int) -> set[int]:
    parent = {n["id"]: n["parent"] for n in nodes}
    out, cur = set(), leaf
    while cur is not None:
        out.add(cur)
        cur = parent.get(cur)
    return out
