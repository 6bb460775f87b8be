"""The four context templates on scripted episodes: what each shows the model, that every model call's exact
input is recorded, and that the training rows are exactly those inputs and outputs."""

import pytest

from selfevolve.agent.context import ContextSpec, EpisodeContext, omitted_note, parse_decision
from selfevolve.agent.prompt import PromptBuilder
from selfevolve.config import load_config
from selfevolve.envs import StepResult, TextEnv
from selfevolve.errors import ConfigError
from selfevolve.models.loading import load_tokenizer
from selfevolve.models.sampler import Generation
from selfevolve.objectives.samples import build_rows
from selfevolve.rollout.runner import rollout
from selfevolve.types import Task


class Log(TextEnv):
    """Every reply is logged and answered with 'entry N'; never ends on its own (max_turns ends it)."""

    name = "log"
    instructions = "Write entries."
    max_turns = 4

    def reset(self, seed):
        self.n = 0
        return "Start the log."

    def step(self, action):
        self.n += 1
        return StepResult(f"entry {self.n} stored", 0.0, False, {"success": False, "valid_action": True})


class ScriptedPolicy:
    """Answers each call with the next scripted text (context calls from their own script) and records the
    exact input of every call."""

    def __init__(self, tok, replies, decisions=()):
        self.tokenizer, self.replies, self.decisions = tok, list(replies), list(decisions)
        self.inputs: list[tuple[str, list[int]]] = []  # (kind, prompt ids) of every call, in order
        self.eot = PromptBuilder(tok, "", []).eot_id()

    def generate(self, prompts, greedy=False, generator=None, state=None, max_new_tokens=None):
        kind = "context" if max_new_tokens is not None else "act"
        script = self.decisions if kind == "context" else self.replies
        gen = Generation()
        for p in prompts:
            self.inputs.append((kind, list(p)))
            ids = self.tokenizer.encode(script.pop(0), add_special_tokens=False) + [self.eot]
            gen.ids.append(ids)
            for stat in (gen.logprobs, gen.entropy, gen.top1, gen.top2):
                stat.append([-0.5] * len(ids))
        return gen

    def decode(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=True)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny")


def builder(tok, name, **spec):
    return PromptBuilder(tok, Log.instructions, [], think=name == "reasoning", context=ContextSpec(name, **spec))


def play(tok, name, replies, decisions=(), **spec):
    b = builder(tok, name, **spec)
    policy = ScriptedPolicy(tok, replies, decisions)
    traj = rollout(policy, [Log()], [Task("t", "log", 0)], b, max_turns=4)[0]
    return b, policy, traj


def check_exact(policy, traj):
    """Each step's prompt is the exact input of its call; the context calls are recorded exactly; each row
    trains every reply on exactly its input."""
    acts = [p for kind, p in policy.inputs if kind == "act"]
    assert [s.prompt_ids for s in traj.steps] == acts
    assert [c["prompt_ids"] for s in traj.steps for c in s.calls] == [p for k, p in policy.inputs if k == "context"]
    rows = build_rows([traj], [1.0])
    for row in rows:
        for (_, t), pos in zip(row.turns, row.value_pos):
            step = traj.steps[t]
            assert row.ids[:pos + 1] == step.prompt_ids
            assert row.ids[pos + 1:pos + 1 + len(step.action_ids)] == step.action_ids
            assert row.mask[pos + 1:pos + 1 + len(step.action_ids)] == [1] * len(step.action_ids)
    assert sum(row.mask.count(1) for row in rows) == sum(len(s.action_ids) for s in traj.steps)
    return rows


def text(tok, ids):
    return tok.decode(ids)


def test_causal_is_append_only_and_one_row(tok):
    b, policy, traj = play(tok, "causal", ["a", "b", "c", "d"])
    rows = check_exact(policy, traj)
    assert len(traj.steps) == 4 and len(rows) == 1  # each prompt extends the last: one packed row
    for prev, step in zip(traj.steps, traj.steps[1:]):
        assert step.prompt_ids[:len(prev.prompt_ids) + len(prev.action_ids)] == prev.prompt_ids + prev.action_ids


def test_reasoning_strips_earlier_thinking(tok):
    replies = [f"<think>plan {k}</think><answer>write {k}</answer>" for k in range(4)]
    b, policy, traj = play(tok, "reasoning", replies)
    rows = check_exact(policy, traj)
    assert len(rows) == 4  # an earlier reply changed in every prompt: one exact row per step
    last = text(tok, traj.steps[3].prompt_ids)
    assert "plan 0" not in last and "plan 2" not in last  # earlier thinking is gone
    assert "<answer>write 0</answer>" in last and "<answer>write 2</answer>" in last  # the actions stay
    assert "First think briefly inside <think>" in last
    assert traj.steps[1].prompt_ids == b.render(b.header() + [
        {"role": "user", "content": "Start the log."}, {"role": "assistant", "content": "<answer>write 0</answer>"},
        {"role": "user", "content": "entry 1 stored"}])


def test_sliding_window_keeps_first_messages_and_last_turns(tok):
    start = builder(tok, "causal").prompt_ids(["Start the log."], [])
    # budget: the first prompt plus a little: one turn fits, two do not
    b, policy, traj = play(tok, "sliding_window", ["aaaa", "bbbb", "cccc", "dddd"], budget=len(start) + 12, window=1)
    rows = check_exact(policy, traj)
    p = [text(tok, s.prompt_ids) for s in traj.steps]
    assert "omitted" not in p[1] and "aaaa" in p[1]  # one turn fits: append-only
    assert traj.steps[1].prompt_ids[:len(start)] == start
    # after 2 turns (a, entry 1, b, entry 2): over budget, keep the last 1 turn -> 1 omitted
    assert traj.steps[2].prompt_ids == b.render(b.header() + [
        {"role": "user", "content": "Start the log."}, omitted_note(1),
        {"role": "assistant", "content": "bbbb"}, {"role": "user", "content": "entry 2 stored"}])
    assert "[2 earlier turns omitted]" in p[3] and "cccc" in p[3] and "bbbb" not in p[3] and "aaaa" not in p[3]
    assert [r.turns for r in rows] == [[(0, 0), (0, 1)], [(0, 2)], [(0, 3)]]  # a new exact row per window


def test_self_managed_applies_the_models_decision(tok):
    b = builder(tok, "causal")
    header = b.header()
    summary = [{"role": "user", "content": "Start the log."},
               {"role": "assistant", "content": "[summary] wrote a long entry"},
               {"role": "user", "content": "entry 1 stored"}]
    budget = len(b.render(header + summary))  # the summarised chat fits exactly; the full one does not
    long = "this reply is long enough to exceed the budget " * 3
    decision = '{"compress": {"1": "wrote a long entry"}}'
    b2, policy, traj = play(tok, "self_managed", [long, "x", "y", "z"], [decision, "no idea", "{}"],
                            budget=budget, window=1)
    check_exact(policy, traj)
    assert traj.steps[0].calls == []
    call = traj.steps[1].calls[0]
    assert call["decision"] == {"remove": [], "compress": {"1": "wrote a long entry"}} and not call["fallback"]
    assert "[1] assistant: " + long.strip() in text(tok, call["prompt_ids"])
    assert traj.steps[1].prompt_ids == b2.render(b2.header() + summary)
    # turn 2 is over budget again; "no idea" is not a decision: the sliding window (1 turn) takes over
    call = traj.steps[2].calls[0]
    assert call["decision"] is None and call["fallback"] and call["text"] == "no idea"
    assert traj.steps[2].prompt_ids == b2.render(b2.header() + [
        {"role": "user", "content": "Start the log."}, omitted_note(1),
        {"role": "assistant", "content": "x"}, {"role": "user", "content": "entry 2 stored"}])
    # "{}" keeps everything, which is still over budget: also slides
    assert traj.steps[3].calls[0]["decision"] == {"remove": [], "compress": {}}
    assert traj.steps[3].calls[0]["fallback"]
    assert "[2 earlier turns omitted]" in text(tok, traj.steps[3].prompt_ids)
    logged = traj.to_dict(with_ids=False)["steps"][1]["calls"][0]
    assert "prompt_ids" not in logged and logged["text"] == decision  # the readable log keeps the decision


def test_parse_decision_is_strict():
    assert parse_decision('ok: {"remove": [1, 3], "compress": {"2": " a  b "}}', 3) == ({1, 3}, {2: "a b"})
    for bad in ("", "remove 1", '{"remove": [4]}', '{"remove": [0]}', '{"remove": "1"}', '{"drop": [1]}',
                '{"remove": [1], "compress": {"1": "x"}}', '{"compress": {"2": ""}}', '{"remove": [true]}', "{"):
        assert parse_decision(bad, 3) is None, bad


def test_context_config():
    cfg = load_config(overrides=["agent.context=sliding_window", "agent.context_budget=512", "agent.context_window=2"])
    assert (cfg.agent.context, cfg.agent.context_budget, cfg.agent.context_window) == ("sliding_window", 512, 2)
    with pytest.raises(ConfigError, match="agent.context: Input should be 'causal', 'reasoning'"):
        load_config(overrides=["agent.context=window"])
    with pytest.raises(ConfigError, match="agent.history=3 applies to agent.context=causal only"):
        load_config(overrides=["agent.context=self_managed", "agent.history=3"])


def test_expert_episodes_follow_the_context(tok):
    from selfevolve.train.warm_start import expert_episodes

    class LogExpert(Log):
        def expert_action(self):
            return f"entry {self.n}"

    b = builder(tok, "sliding_window", budget=1, window=1)
    traj = expert_episodes(LogExpert, {}, [Task("t", "log", 0)], b, tok)[0]
    assert "[2 earlier turns omitted]" in text(tok, traj.steps[3].prompt_ids)
    rows = build_rows([traj], [0.0])
    # one turn is within the window (the prompt still extends the last one); after that each is its own row
    assert [r.turns for r in rows] == [[(0, 0), (0, 1)], [(0, 2)], [(0, 3)]]
    for row in rows:
        for (_, t), pos in zip(row.turns, row.value_pos):
            assert row.ids[:pos + 1] == traj.steps[t].prompt_ids


def test_a_guided_sliding_window_trains_on_the_sampled_prompt_minus_the_block(tok):
    """Self-navigating's twin (the training prompt) slides when the guided episode does: at every turn its prompt
    is exactly the sampled prompt without the insight block. The block makes the guided prompt longer, so a twin
    that decided by its own length slid later (issue 41: ~7 % of turns); a budget between the two lengths shows
    that."""
    from selfevolve.agent.guidance import Guidance

    block = "Insight: walk towards the goal and avoid holes you have already seen once before."
    b = builder(tok, "sliding_window", budget=10_000, window=1)
    plain = EpisodeContext(b, "", "Start the log.")
    guided = EpisodeContext(b, "", "Start the log.", Guidance(block=block))
    extra = len(guided.prompt) - len(plain.prompt)
    assert extra > 5
    # a budget the guided prompt crosses one turn before its twin would: the first turn's prompt plus ~2 turns
    reply = tok.encode("aaaa", add_special_tokens=False) + [b.eot_id()]
    trial = EpisodeContext(b, "", "Start the log.")
    lengths = []
    for n in range(1, 5):
        trial.advance(reply, "aaaa", f"entry {n} stored")
        lengths.append(len(trial.prompt))
    b.context.budget = lengths[1] + extra // 2  # twin: turn 2 fits; guided: it does not
    guided = EpisodeContext(b, "", "Start the log.", Guidance(block=block))
    slid = []
    for n in range(1, 5):
        guided.advance(reply, "aaaa", f"entry {n} stored")
        sampled, trained = tok.decode(guided.prompt), tok.decode(guided.train_prompt)
        assert trained == sampled.replace("\n" + block, ""), n
        assert guided.twin.body == guided.body and guided.twin.omitted == guided.omitted
        slid.append(guided.omitted)
    assert slid[1] > 0  # the guided episode slid at turn 2, where its twin alone would not have yet
