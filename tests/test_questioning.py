"""Self-questioning on real parts: the shop world, its tools and database, the tiny policy, the trainer."""

import json

import pytest

from selfevolve import Trainer, load_config
from selfevolve.envs import SokobanEnv, make_env
from selfevolve.envs.task_files import save_tasks
from selfevolve.envs.tools import ShopEnv
from selfevolve.envs.tools.calls import format_tool_call
from selfevolve.errors import ConfigError, SelfEvolveError
from selfevolve.questioning.explore import (BREADTH_HINT, CALL_OPEN, DEPTH_HINT, NO_FINISH, REPEAT, Exploration,
                                            ExplorationRecord, first_call)
from selfevolve.lexical import jaccard, words
from selfevolve.questioning.filters import diversity, execute, grounded, is_duplicate, mentions, verifies
from selfevolve.questioning.pipeline import run_questioning
from selfevolve.questioning.synthesize import (WRITER_EXAMPLE, WRITER_OPENING, parse_tasks, template_tasks,
                                              writer_messages)
from selfevolve.types import Task

TINY = ["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=8"]


def shop_order(split="train"):
    """A pending order of a training (or test) customer, read from the shop's own tasks."""
    env = make_env("shop", split=split)
    task = next(t for t in env.tasks if t.intent == "cancel_order")
    return env, task.solution[0]["arguments"]["order_id"]


def test_exploration_scans_operations_before_chaining_and_refuses_repeats():
    world, order = shop_order()
    env = Exploration(world, breadth_steps=2, max_turns=4, entities="orders")
    assert "orders" in env.reset(0)
    call = format_tool_call("get_order", {"order_id": order})
    obs = env.step(call).observation
    assert obs.endswith(BREADTH_HINT.format(ops=", ".join(op for op in env.operations if op != "get_order")))
    obs, _, done, info = env.step(call)  # the same call again: refused, the world is not stepped
    assert obs.startswith(REPEAT) and not info["valid_action"] and world.turn == 1
    assert obs.endswith(DEPTH_HINT)  # 2 turns done: depth from now on
    env.step(format_tool_call("get_order", {"order_id": "nope"}))  # a refused call: logged, not working
    obs, _, done, _ = env.step(format_tool_call("finish", {"answer": "x"}))  # nothing to finish: refused
    assert obs.startswith(NO_FINISH) and done and not world.done  # (the 4th turn ends the exploration)
    assert [t["valid"] for t in env.log] == [True, False, False, False] and env.log[1]["repeat"]
    record = ExplorationRecord(0, env.log)
    assert len(record.good_turns) == 1 and record.text().startswith("1. <tool_call>")


def test_prefill_opens_an_unused_operation_in_breadth_and_the_call_format_in_depth():
    world, order = shop_order()
    env = Exploration(world, breadth_steps=2, max_turns=4)
    env.reset(5)
    ops = env.operations  # 11 operations: seed 5, turn 0 opens the 6th, find_products (its one argument: query)
    assert ops[5] == "find_products"
    assert env.reply_prefix() == '<tool_call>\n{"name": "find_products", "arguments": {"query": "'
    # the model completes it: the reply is the prefix plus its text, a well-formed call
    reply = env.reply_prefix() + 'shirt"}}\n</tool_call>'
    assert world.toolset.parse(reply).arguments == {"query": "shirt"}
    env.step(format_tool_call("get_order", {"order_id": order}))
    unused = [op for op in ops if op != "get_order"]  # turn 1, seed 5: the 7th of 10, (5 + 1) % 10 = 6
    assert unused[6] == "cancel_order"
    assert env.reply_prefix() == f'{CALL_OPEN}cancel_order", "arguments": {{"order_id": "'
    env.step(format_tool_call("get_order", {"order_id": "nope"}))
    assert env.reply_prefix() == CALL_OPEN  # depth: the model chooses the operation
    env.reset(0)
    assert env.reply_prefix().startswith(f'{CALL_OPEN}{ops[0]}"')  # another seed, another first operation
    plain = Exploration(world, prefill="format")
    plain.reset(5)
    assert plain.reply_prefix() == CALL_OPEN
    assert Exploration(world, prefill="none").reply_prefix() == ""
    with pytest.raises(ValueError, match="prefill must be one of none, format, operation"):
        Exploration(world, prefill="all")


def test_shop_exploration_starts_from_a_training_customer():
    world, _ = shop_order()
    env = Exploration(world)
    marks = world.held_out_marks()
    emails = set()
    for seed in range(20):
        first = env.reset(seed)
        email = first.rsplit("email ", 1)[1].rstrip(".")
        assert email not in marks and not any(m in first for m in marks)
        emails.add(email)
        assert env.step(format_tool_call("find_user_by_email", {"email": email})).info["valid_action"]
        assert env.log[-1]["valid"]  # the call ran: the anchor is a real customer
    assert len(emails) == 20  # one customer per sandbox seed


def test_first_call_drops_what_follows_a_complete_call():
    call = '<tool_call>\n{"name": "find_products", "arguments": {"query": "shirt"}}\n</tool_call>'
    assert first_call('<tool_call>\n{"name": "find_products", "arguments": {"query": "shirt"}}, "new_id": 12}') \
        == call
    assert first_call('I look.<tool_call>```json\n{"name": "find_products", "arguments": {"query": "shirt"}}```') \
        == "I look." + call
    for reply in ('<tool_call>\n{"name": "get_order", "arguments": {"order_id": 12', "no call", "<tool_call>[1, 2]"):
        assert first_call(reply) == reply  # nothing complete to keep: unchanged, the world refuses it
    world, _ = shop_order()
    env = Exploration(world, max_turns=2)
    env.reset(0)
    env.step('<tool_call>\n{"name": "find_products", "arguments": {"query": "shirt"}}, "new_id": 12}')
    assert env.log[0]["valid"] and env.log[0]["call"] == world.toolset.parse(call).text()


def test_jaccard_and_duplicates_by_hand():
    # {where, is, my, order, w1} vs {where, is, order, w1}: 4 shared of 5 -> 0.8, a duplicate at 0.8
    assert jaccard("Where is my order W1?", "where is order w1") == pytest.approx(0.8)
    assert is_duplicate("Where is my order W1?", ["where is order w1"], 0.8)
    assert not is_duplicate("Where is my order W1?", ["where is order w1"], 0.81)
    assert jaccard("", "") == 1.0 and jaccard("a b", "c d") == 0.0
    assert mentions({"U007"}, "orders of u007 please") and not mentions({"U007"}, "U0071")
    assert diversity(["a b", "a b"]) == 0.0 and diversity(["a b", "c d"]) == 1.0


def test_words_are_unicode_words():
    """Requests without ASCII letters are not all duplicates of each other, and accents stay in the word."""
    assert words("Café au lait") == {"café", "au", "lait"}
    assert words("Где мой заказ 42?") == {"где", "мой", "заказ", "42"}
    # two different Cyrillic requests: {где, мой, заказ} vs {отмените, заказ}: 1 shared of 4
    assert jaccard("Где мой заказ?", "Отмените заказ") == pytest.approx(0.25)
    assert not is_duplicate("Где мой заказ?", ["Отмените заказ"], 0.8)
    assert words("mail a@b.com about id_7, O'Neil's order") == {"mail", "a@b.com", "about", "id_7", "o'neil's",
                                                               "order"}


def test_execution_keeps_working_references_with_their_goal_and_drops_failing_ones():
    world, order = shop_order()
    lookup = [{"name": "get_order", "arguments": {"order_id": order}}]
    run = execute(world, 0, lookup + [{"name": "finish", "arguments": {"answer": "pending"}}])
    assert run.ok and run.goal == {"answer": "pending", "changes": {}}
    assert not execute(world, 0, [{"name": "get_order", "arguments": {"order_id": "W0000"}}]).ok  # tool refuses
    assert "does not end with finish" in execute(world, 0, lookup).reason
    assert not execute(world, 0, [{"name": "no_such_tool", "arguments": {}}]).ok
    assert "finish is call 1" in execute(world, 0, [{"name": "finish", "arguments": {"answer": 1}}] + lookup).reason

    # a write: the goal records the rows it changed, and the task it makes is solved by its reference only
    cancel = lookup + [{"name": "cancel_order", "arguments": {"order_id": order, "reason": "no longer needed"}},
                       {"name": "finish", "arguments": {"answer": "cancelled"}}]
    run = execute(world, 0, cancel)
    assert run.ok and run.goal["changes"]
    task = Task("shop-synth-0000", split="synth", level=2, intent="cancel_order",
                instruction=f"Cancel order {order}.", goal=run.goal, solution=cancel)
    assert verifies(make_env("shop"), task)
    env = make_env("shop")
    env.load(task)
    assert not env.step(format_tool_call("finish", {"answer": "cancelled"})).info["success"]  # nothing changed


def test_writer_prompt_and_parsing():
    msgs = writer_messages(ShopEnv.profile, "1. get_order(...)", ["Where is order W1?"], 2, 3)
    assert msgs[1]["role"] == "user" and "library" in msgs[1]["content"]  # the worked example comes first
    assert "Where is order W1?" in msgs[-1]["content"] and "about 3 operations" in msgs[-1]["content"]
    reply = ('Here: [{"query": " Where is  my order? ", "confidence": 7, "action_sequence": [{"name": "get_order", '
             '"arguments": {"order_id": "W1"}}, "junk", {"name": "finish"}]}, {"query": 3}]')
    assert parse_tasks(reply) == [{"query": "Where is my order?", "confidence": 1.0, "action_sequence": [
        {"name": "get_order", "arguments": {"order_id": "W1"}}, {"name": "finish", "arguments": {}}]}]
    assert parse_tasks("no json") is None and parse_tasks('[{"query": ""}]') is None


def test_writer_json_one_bracket_off_is_mended():
    from selfevolve.models.llm import mend_brackets

    # a real 135M writer reply (tables): one brace too many after the first call's arguments, the list unclosed
    reply = ('[{"query": "How many rows of the table are there?", "confidence": 0.9, "action_sequence": [{"name": '
             '"load_table", "arguments": {"table": "employees"}}}, {"name": "finish", "arguments": {"answer": "80"}}]')
    assert parse_tasks(reply) == [{"query": "How many rows of the table are there?", "confidence": 0.9,
                                   "action_sequence": [{"name": "load_table", "arguments": {"table": "employees"}},
                                                       {"name": "finish", "arguments": {"answer": "80"}}]}]
    # brackets inside strings are text; an escaped quote does not end a string; prose after the value is cut
    assert mend_brackets('{"a": "x}]\\"", "b": [1, 2') == '{"a": "x}]\\"", "b": [1, 2]}'
    assert mend_brackets('{"a": "cut sho') == '{"a": "cut sho"}'
    assert mend_brackets('[1, 2]] and then {"x": 1}') == "[1, 2]"
    assert parse_tasks('[{"query": "q", "action_sequence": [1, 2}') is not None  # mended: a query, no calls
    assert parse_tasks("no json [ at all") is None


def test_writer_prefill_opens_the_reply_in_json(tmp_path):
    from selfevolve.agent.prompt import render_chat
    from selfevolve.models.llm import LLM
    from selfevolve.build import build_policy

    policy = build_policy(load_config(overrides=TINY))
    llm = LLM("policy", policy, log_dir=tmp_path, max_new_tokens=6)
    msgs = writer_messages(ShopEnv.profile, "1. get_user(U001)", [], 1, 2)
    (reply,) = llm.chat([msgs], purpose="write_tasks", prefix=WRITER_OPENING)
    # the opening is part of the prompt the model continues, and of the reply that is parsed and logged
    opening = policy.tokenizer.encode(WRITER_OPENING, add_special_tokens=False)
    (ids,) = policy.generate([render_chat(policy.tokenizer, msgs) + opening], greedy=True, max_new_tokens=6).ids
    assert reply == WRITER_OPENING + policy.decode(ids)
    assert json.loads((tmp_path / "llm_calls.jsonl").read_text())["output"] == reply
    (plain,) = llm.chat([msgs], purpose="write_tasks")
    assert not plain.startswith(WRITER_OPENING)  # the random model does not write JSON by itself


def test_a_lookups_answer_must_be_something_its_calls_returned():
    # the 135M tables writer's kept task before this filter: 80 rows returned, "10" answered
    loaded = ['{"table": "employees", "rows": 80, "columns": ["id", "name", "department"]}']
    assert not grounded("10", loaded) and grounded("80", loaded) and grounded(80, loaded) and grounded("80.0", loaded)
    assert grounded("Name, ID", loaded) and not grounded("name, salary", loaded)  # a list: every part returned
    assert not grounded("", loaded) and not grounded("employees table", loaded)
    assert grounded("$1,250.5", ['{"total": 1250.5}', "Error: not JSON"]) and not grounded("1250", ['{"t": 1250.5}'])
    world, order = shop_order()
    run = execute(world, 0, [{"name": "get_order", "arguments": {"order_id": order}},
                             {"name": "finish", "arguments": {"answer": "x"}}])
    assert run.ok and len(run.results) == 1 and json.loads(run.results[0].splitlines()[0])["order_id"] == order


def test_template_writer_phrases_a_verified_lookup():
    world, order = shop_order()
    env = Exploration(world, breadth_steps=0, max_turns=2)
    env.reset(0)
    env.step(format_tool_call("get_order", {"order_id": order}))
    (task,) = template_tasks(ExplorationRecord(0, env.log), ShopEnv.profile)
    assert order in task["query"] and task["action_sequence"][-1]["name"] == "finish"
    assert execute(make_env("shop"), 0, task["action_sequence"]).ok


def test_split_option_takes_synthesized_tasks(tmp_path):
    world, order = shop_order()
    calls = [{"name": "get_order", "arguments": {"order_id": order}},
             {"name": "finish", "arguments": {"answer": "pending"}}]
    run = execute(world, 0, calls)
    path = tmp_path / "tasks.jsonl"
    save_tasks([Task("shop-synth-0000", split="synth", level=1, intent="order_status",
                     instruction=f"Status of {order}?", goal=run.goal, solution=calls)], str(path))
    only = make_env("shop", tasks_file=str(path), split="synth")
    mixed = make_env("shop", tasks_file=str(path), split="train+synth")
    assert [t.id for t in only.tasks] == ["shop-synth-0000"]
    assert len(mixed.tasks) == len(make_env("shop").tasks) + 1
    with pytest.raises(ConfigError, match="train\\+synth"):
        make_env("shop", split="train+dev")

    # trains end to end on it, evaluated on the world's own test split
    out = tmp_path / "run"
    final = Trainer(load_config(overrides=[
        *TINY, "env.name=shop", f"env.tasks_file={path}", "env.split=synth", "train.steps=1",
        "train.tasks_per_step=1", "algo.group_size=2", "eval.episodes=2", "train.progress=false",
        "train.warm_start_steps=0", "env.max_turns=2", f"train.out_dir={out}"])).train()
    first = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])
    assert first["steps"][0]["info"]["task_id"] == "shop-synth-0000"
    assert 0.0 <= final["eval/success"] <= 1.0


def test_explore_pipeline_end_to_end(tmp_path, monkeypatch):
    out = tmp_path / "q"
    cfg = load_config(overrides=[*TINY, "env.name=shop", "questioning.explorations=2", "questioning.steps=2",
                                 "questioning.max_new_tokens=16", f"questioning.out={out}"])
    report = run_questioning(cfg)
    assert report["explorations"] == 2 and report["calls"] == 4
    lines = (out / "explorations.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(len(json.loads(x)["turns"]) == 2 for x in lines)
    # prefill (the default, operation): every reply began as a tool call, whatever the random model wrote
    assert all(t["call"].startswith("<tool_call>") for x in lines for t in json.loads(x)["turns"])
    assert json.loads((out / "report.json").read_text()) == report
    assert (out / "tasks.jsonl").read_text() == "" if report["kept"] == 0 else True
    monkeypatch.setattr(SokobanEnv, "profile", None)  # a world without a profile (every built-in one has one)
    with pytest.raises(SelfEvolveError, match="profile"):
        run_questioning(load_config(overrides=[*TINY, "env.name=sokoban", f"questioning.out={out}"]))


def test_tasks_are_written_again_from_saved_explorations(tmp_path, monkeypatch):
    from selfevolve.models.llm import LLM

    world, order = shop_order()
    env = Exploration(world, breadth_steps=0, max_turns=2)
    env.reset(0)
    env.step(format_tool_call("get_order", {"order_id": order}))
    env.step("not a call")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "explorations.jsonl").write_text(json.dumps({"seed": 0, "turns": env.log}) + "\n")
    (earlier / "report.json").write_text(json.dumps({"env": "shop"}))
    out = tmp_path / "again"
    report = run_questioning(load_config(overrides=[*TINY, "env.name=shop", "questioning.writer=template",
                                                    f"questioning.explorations_from={earlier}",
                                                    f"questioning.out={out}"]))
    # no exploring: the one saved exploration, its 2 calls (1 working), copied into the new folder
    assert (report["explorations"], report["calls"], report["working_calls"], report["kept"]) == (1, 2, 1, 1)
    assert (out / "explorations.jsonl").read_text() == (earlier / "explorations.jsonl").read_text()
    (task,) = [json.loads(x) for x in (out / "tasks.jsonl").read_text().splitlines()]
    assert task["solution"][0] == {"name": "get_order", "arguments": {"order_id": order}}
    # the LLM writer on the same exploration: a copy of the worked example is a duplicate, a real task is kept
    status = json.loads(env.log[0]["result"])["status"]
    def look_up(query, answer):
        return {"query": query, "action_sequence": [{"name": "get_order", "arguments": {"order_id": order}},
                                                    {"name": "finish", "arguments": {"answer": answer}}]}
    replies = {"write_tasks": [json.dumps([json.loads(WRITER_EXAMPLE[1]["content"])[0],
                                           look_up(f"What is the status of my order {order}?", status),
                                           look_up("How many items are in it?", "12345")])],
               "intent": ["order_status"]}
    monkeypatch.setattr(LLM, "chat", lambda self, convs, purpose, **kw: replies[purpose][:len(convs)])
    written = run_questioning(load_config(overrides=[*TINY, "env.name=shop", f"questioning.explorations_from={earlier}",
                                                     f"questioning.out={tmp_path / 'llm'}"]))
    assert written["candidates"] == 3 and written["kept"] == 1
    assert written["removed"] == {"unparseable": 0, "duplicate": 1, "empty_reference": 0, "held_out": 0,
                                  "execution": 0, "ungrounded": 1, "unverifiable": 0}
    assert written["intents"] == {"order_status": 1}
    # the same folder as its own source: read before it is emptied
    again = run_questioning(load_config(overrides=[*TINY, "env.name=shop", "questioning.writer=template",
                                                   f"questioning.explorations_from={out}", f"questioning.out={out}"]))
    assert again["kept"] == 1
    with pytest.raises(SelfEvolveError, match="explored 'shop', not 'tables'"):
        run_questioning(load_config(overrides=[*TINY, "env.name=tables", f"questioning.explorations_from={earlier}",
                                               f"questioning.out={tmp_path / 'x'}"]))
    (earlier / "explorations.jsonl").write_text('{"seed": 0}\n')
    with pytest.raises(SelfEvolveError, match="line 1: not an exploration record"):
        run_questioning(load_config(overrides=[*TINY, "env.name=shop", f"questioning.explorations_from={earlier}",
                                               f"questioning.out={tmp_path / 'x'}"]))
    with pytest.raises(SelfEvolveError, match="no explorations file"):
        run_questioning(load_config(overrides=[*TINY, "env.name=shop",
                                               f"questioning.explorations_from={tmp_path / 'none'}"]))
