"""Constrained decoding on the tiny model and the real tokenizer: every reply has its grammar's shape, whatever
the random model would write; the writer's and the judge's schemas parse; the masks are what they say."""

import json

import pytest
import torch

from selfevolve.agent.prompt import render_chat
from selfevolve.envs.tools.shop import ShopEnv
from selfevolve.models.constrained import Constrained, Free, Lit, OneOf, free_token_mask, one_of
from selfevolve.models.llm import LLM
from selfevolve.models.loading import load_model
from selfevolve.models.policy import Policy
from selfevolve.questioning.games import named_target
from selfevolve.questioning.schema import game_tasks, tool_tasks
from selfevolve.questioning.synthesize import parse_tasks
from selfevolve.rewards.attribution import judge_steps, JudgeItem, judgment_grammar, parse_step_judgments

MOVES = ["Left", "Down", "Right", "Up"]


@pytest.fixture(scope="module")
def policy():
    model, tok = load_model("tiny", "fp32", seed=0)
    return Policy(model, tok, lora=None, temperature=1.0, max_new_tokens=320)


def prompts(policy, n=4):
    return [render_chat(policy.tokenizer, [{"role": "user", "content": f"question {i}"}]) for i in range(n)]


def test_segments_literal_choice_free_then_the_end_of_turn(policy):
    seen = []

    def grammar():
        yield Lit("Answer: ")
        word = yield OneOf(["yes", "no", "maybe"])
        seen.append(word)
        yield Lit(' because "')
        seen.append((yield Free(end='"', max_tokens=5)))

    gen = policy.generate(prompts(policy), constraint=Constrained(policy.tokenizer, [grammar() for _ in range(4)]),
                          generator=torch.Generator().manual_seed(0))
    for ids in gen.ids:
        assert ids[-1] in policy.stop_ids  # the grammar returned: only the end of the turn could follow
        text = policy.decode(ids)
        word, reason = text.removeprefix("Answer: ").split(' because "')
        assert word in ("yes", "no", "maybe") and reason.endswith('"') and '"' not in reason[:-1]
        assert 1 <= len(policy.tokenizer.encode(reason[:-1], add_special_tokens=False)) <= 5 + 2
    # the grammars received what was chosen (the rows advance together: the 4 words, then the 4 free texts)
    assert all(w in ("yes", "no", "maybe") for w in seen[:4]) and all('"' not in t for t in seen[4:])
    # a forced token has probability 1 under the masked distribution: log-prob 0
    forced = policy.tokenizer.encode("Answer: ", add_special_tokens=False)
    assert gen.ids[0][:len(forced)] == forced and gen.logprobs[0][:len(forced)] == [0.0] * len(forced)
    assert all(e == e for row in gen.entropy for e in row)  # no NaN from the masked (-inf) logits


def test_the_free_mask_by_hand(policy):
    tok = policy.tokenizer
    mask = free_token_mask(tok, '"\n')
    quote, nl, word = tok.encode('"', add_special_tokens=False)[0], 198, tok.encode(" row", add_special_tokens=False)[0]
    assert not mask[quote] and not mask[nl] and mask[word]
    assert not any(mask[i] for i in tok.all_special_ids)
    digits = free_token_mask(tok, "", "0123456789")
    assert {tok.decode([i]) for i in torch.nonzero(digits).flatten().tolist()} == set("0123456789")


def test_exploration_answers_masked_to_the_moves(policy):
    with policy.constrained(lambda n: Constrained(policy.tokenizer, [one_of(MOVES)() for _ in range(n)])):
        gen = policy.generate(prompts(policy, 8), generator=torch.Generator().manual_seed(1))
    assert all(policy.decode(ids) in MOVES for ids in gen.ids)
    assert policy.constraint_factory is None  # only within the block
    free = policy.generate(prompts(policy, 2), generator=torch.Generator().manual_seed(1), max_new_tokens=6)
    assert not all(policy.decode(ids) in MOVES for ids in free.ids)  # the random model alone writes other things


def test_the_game_writer_schema_always_parses_and_names_a_cell(policy):
    board = ["SFFF", "HFFF", "FFHH", "FFFG"]
    llm = LLM("policy", policy, max_new_tokens=400, batch_size=4)
    convs = [[{"role": "user", "content": f"Write tasks {i}."}] for i in range(4)]
    replies = llm.chat(convs, purpose="write_tasks", grammars=[game_tasks(MOVES, 4, 4, 2, 6)] * 4)
    for reply in replies:
        tasks = parse_tasks(reply, bare_steps=True)
        assert tasks is not None and 1 <= len(tasks) <= 2
        json.loads(reply)  # the whole reply is one JSON list
        for t in tasks:
            assert named_target(t["query"], board) is not None
            assert 1 <= len(t["action_sequence"]) <= 6 and {s["name"] for s in t["action_sequence"]} <= set(MOVES)
    plain = llm.chat(convs[:2], purpose="write_tasks", max_new_tokens=40)
    assert all(parse_tasks(r, bare_steps=True) is None for r in plain)  # what the schema changes


def test_the_tool_writer_schema_uses_the_worlds_tools_and_their_arguments(policy):
    llm = LLM("policy", policy, max_new_tokens=500, batch_size=4)
    replies = llm.chat([[{"role": "user", "content": "Write a task."}]] * 2, purpose="write_tasks",
                       grammars=[tool_tasks(ShopEnv.toolset, 1, 3, query_tokens=8, value_tokens=4)] * 2)
    for reply in replies:
        (task,) = parse_tasks(reply)
        calls = task["action_sequence"]
        assert calls[-1]["name"] == "finish" and set(calls[-1]["arguments"]) == {"answer"}
        for c in calls[:-1]:
            schema = ShopEnv.toolset[c["name"]].parameters
            assert list(c["arguments"]) == list(schema.get("required", []))
            for k, v in c["arguments"].items():
                kind = schema["properties"][k].get("type")
                assert isinstance(v, int) if kind in ("integer", "number") else isinstance(v, str)


def test_the_judge_schema_labels_every_step(policy):
    llm = LLM("policy", policy, max_new_tokens=200, batch_size=4)
    items = [JudgeItem("Reach G.", "P _\n_ G", [("Right", "_ P"), ("Down", "√")] * k, True) for k in (1, 2)]
    judged, stats = judge_steps(llm, items, constrained=True)
    assert stats["attribution/defaulted"] == 0 and stats["attribution/unparsed"] == 0
    assert [len(j) for j in judged] == [2, 4] and all(x["label"] in ("GOOD", "BAD") for j in judged for x in j)
    replies = llm.chat([[{"role": "user", "content": "judge"}]], purpose="attribution",
                       grammars=[judgment_grammar(3)])
    parsed, how = parse_step_judgments(replies[0], 3)
    assert how == "numbered" and all(label in ("GOOD", "BAD") for label, _ in parsed)
    plain, stats = judge_steps(llm, items, constrained=False, tokens_per_step=16)
    assert stats["attribution/defaulted"] > 0  # the random model's own replies hold no labels
