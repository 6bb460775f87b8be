"""Any string a model (or an attacker) writes is a valid action or a penalised invalid one — never an exception.

Two kinds of input, over every registered environment and every parser of model text (tests/adversarial.py):
the committed corpus of cases that once crashed or stalled something (RecursionError on deep JSON, 5,000-digit
integers, lone surrogates, megabyte replies, a calculator input that computed 10**99999999), and
property-based fuzzing with hypothesis (tag soups, tool calls around arbitrary JSON, long repetitions,
surrogates). Time bounds are measured by benchmarks/bench_adversarial.py, not asserted here.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adversarial import FRAGMENTS, PARSERS, TOOLS, check_step, corpus
from selfevolve.envs import ENVS, make_env
from selfevolve.envs.tools.calls import CallError, parse_tool_call
from selfevolve.untrusted import MAX_ACTION_CHARS, MAX_JSON_DEPTH, clean_text, loads_json

CASES = corpus()
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---- strategies -----------------------------------------------------------------------------------------------
# Characters: any code point, lone surrogates included (hypothesis leaves them out by default).
chars = st.one_of(st.characters(), st.characters(categories=["Cs"]))
fragment_soup = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(chars, max_size=6)), max_size=40).map("".join)
repeated = st.tuples(st.sampled_from(FRAGMENTS), st.integers(1, 3000)).map(lambda p: p[0] * p[1])
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**40, 10**40), st.floats(allow_nan=True),
                      st.text(chars, max_size=12))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(chars, max_size=8), inner,
                                                                             max_size=4)), max_leaves=30)
@st.composite
def tool_calls(draw) -> str:
    """A tool call around arbitrary JSON arguments (sometimes as a JSON string, sometimes unclosed)."""
    args = draw(json_value)
    body = {"name": draw(st.sampled_from(TOOLS)),
            "arguments": json.dumps(args) if draw(st.booleans()) else args}
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    close = draw(st.sampled_from(["</tool_call>", "", "</tool_call><tool_call>"]))
    return f"{draw(st.sampled_from(['', 'Sure. ', '<think>x</think>']))}<tool_call>{text}{close}"


actions = st.one_of(st.text(chars, max_size=200), fragment_soup, repeated, tool_calls())


# ---- the corpus -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=sorted(ENVS))
def env(request):
    return make_env(request.param)


def test_corpus_cases_are_what_they_say():
    names = [name for name, _ in CASES]
    assert len(names) == len(set(names)) >= 20
    by_name = dict(CASES)
    assert len(by_name["answer_tags_1mb"]) == 8 * 131072 >= 2**20  # a megabyte
    assert "\ud800" in by_name["raw_lone_surrogate"]
    assert by_name["escaped_lone_surrogate"].count("\\ud800") == 1


def test_every_env_survives_the_corpus(env):
    for name, text in CASES:
        env.reset(3)
        result = check_step(env, text)
        # the next step from the same episode still works: the bad action left the world consistent
        follow = env.expert_action() if hasattr(env, "expert_action") else None
        if follow is not None and not result.done:
            assert check_step(env, follow).info["valid_action"], name


@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_every_parser_survives_the_corpus(parser):
    for _name, text in CASES:
        PARSERS[parser](text)


# ---- property-based fuzzing -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ENVS))
def test_every_env_turns_any_string_into_an_action(name):
    env = make_env(name)

    @FUZZ
    @given(action=actions, seed=st.integers(0, 50))
    def step(action, seed):
        env.reset(seed)
        check_step(env, action)

    step()


@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_every_parser_takes_any_string(parser):
    @FUZZ
    @given(text=actions)
    def parse(text):
        PARSERS[parser](text)

    parse()


# ---- the bounds themselves, by hand ---------------------------------------------------------------------------
def test_json_bounds():
    assert loads_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None  # 32 levels: fine
    for text in ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),  # 33 levels
                 "[" * 100_000 + "]" * 100_000,  # the C decoder's RecursionError
                 "9" * 33, "-" + "9" * 33, "1e999", "NaN", "[Infinity]"):
        with pytest.raises(json.JSONDecodeError):
            loads_json(text)
    assert loads_json("9" * 32) == int("9" * 32)
    assert loads_json('{"\\ud800a": ["\\ud83d\\ude00", "\\udc00"]}') == {"\ufffda": ["\U0001f600", "\ufffd"]}


def test_clean_text_replaces_only_lone_surrogates():
    assert clean_text("plain") == "plain"
    assert clean_text("é\U0001f600") == "é\U0001f600"
    assert clean_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert clean_text("\ud83d\ude00") == "\U0001f600"  # a pair written as two code points is joined


def test_over_long_replies_are_refused_with_the_limit_named():
    call = '<tool_call>{"name": "finish", "arguments": {"answer": "' + "x" * MAX_ACTION_CHARS + '"}}</tool_call>'
    with pytest.raises(CallError, match="at most 32,768 are read"):
        parse_tool_call(call)
    shop = make_env("shop")
    shop.reset(0)
    result = shop.step(call)
    assert not result.info["valid_action"] and result.reward == -0.1 and "32,768" in result.observation
    lake = make_env("frozenlake")
    lake.reset(0)
    assert not lake.step("Left " * 10_000).info["valid_action"]  # 50,000 characters, every word a move
    assert lake.step("Left").info["valid_action"]


def test_lone_surrogate_answer_is_a_clean_valid_call():
    """The issue's case: a surrogate inside the tool call's JSON string made state_key() raise."""
    shop = make_env("shop")
    shop.reset(0)
    result = shop.step('<tool_call>{"name": "finish", "arguments": {"answer": "ok\\ud800"}}</tool_call>')
    assert result.info["valid_action"] and result.done
    assert result.info["tool_call"]["arguments"]["answer"] == "ok\ufffd"
    shop.state_key().encode("utf-8")
