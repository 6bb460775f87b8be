"""selfevolve evolve on real parts: FrozenLake's maps, the template writer, the filters, the tiny policy, the
trainer. Hindsight tasks verify by replay; the pool draws by learnability; imitation rows carry their weights and
ratios; two rounds run end to end and resume mid-round to the same result."""

import json
import math
import random
import shutil

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from selfevolve import cli, load_config
from selfevolve.algos.imitation import imitation_loss
from selfevolve.envs import FrozenLakeEnv, make_env
from selfevolve.evolve import Evolver
from selfevolve.evolve.hindsight import write_tasks
from selfevolve.evolve.imitation import ImitationTerm, buffer_rows, reference_episodes
from selfevolve.evolve.loop import EvolveTrainer, rl_steps, share
from selfevolve.evolve.pool import Entry, PoolTasks, TaskPool
from selfevolve.questioning import grid_tasks
from selfevolve.questioning.explore import ExplorationRecord
from selfevolve.questioning.games import FROZENLAKE_GAME, GameExploration
from selfevolve.build import build_policy, build_prompt
from selfevolve.errors import ConfigError
from selfevolve.objectives.samples import collate
from selfevolve.view.load import load_run
from selfevolve.types import Task as WorldTask

TINY = ["model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=8", "train.progress=false"]
SEED0 = ["SFFF", "HFFF", "FFHH", "FFFG"]  # training seed 0's map (split=train redraws the held-out ones)
WALK = ["Right", "Right", "Left", "Down", "Down", "Down", "Right", "Right"]  # ends on G at the 8th move
# The cells the walk reached, in order of first arrival, with the loop-erased moves that got there (by hand):
REACHED = [((0, 1), ["Right"]), ((0, 2), ["Right", "Right"]), ((1, 1), ["Right", "Down"]),
           ((2, 1), ["Right", "Down", "Down"]), ((3, 1), ["Right", "Down", "Down", "Down"]),
           ((3, 2), ["Right", "Down", "Down", "Down", "Right"]), ((3, 3), ["Right", "Down", "Down", "Down", "Right", "Right"])]


def walked(seed=0, moves=WALK) -> ExplorationRecord:
    """A scripted exploration of a training map (what the explorer logs, without a model)."""
    env = GameExploration(FrozenLakeEnv(split="train"), breadth_steps=4, max_turns=8)
    env.reset(seed)
    for m in moves:
        if env.step(m).done:
            break
    return ExplorationRecord(seed=seed, turns=env.log)


def test_hindsight_tasks_are_the_states_reached_verified_by_replay(tmp_path):
    cfg = load_config(overrides=TINY + ["evolve.hindsight=cell"])
    world = FrozenLakeEnv(split="train")
    world.reset(0)
    assert world.desc == SEED0
    record = walked()
    kept, report = write_tasks(cfg, FrozenLakeEnv, [record], None, set(), [], tmp_path, TaskPool.key)
    assert [(tuple(t.goal["target"]), t.solution) for t, _, _ in kept] == REACHED
    assert kept[-1][0].instruction == "Walk from your start to the goal G without falling into a hole."
    assert {w for _, w, _ in kept} == {"template"} and {s for _, _, s in kept} == {0}
    assert report["candidates"] == 7 and report["kept"] == 7 and not any(report["removed"].values())
    assert report["intents"] == {"reach_cell": 6, "reach_goal": 1}

    # every kept task is solved by its reference, played in the environment of the pool (split=synth)
    pool = TaskPool()
    pool.add(kept, 0)
    tasks_file = pool.save(tmp_path / "pool")
    options = {"split": "synth", "tasks_file": str(tasks_file)}
    policy = build_policy(cfg)
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv, **options))
    src = PoolTasks(pool, "frozenlake", list(range(len(pool))))
    demos = reference_episodes(FrozenLakeEnv, options, [src.task(i) for i in range(len(pool))],
                               [e.task.solution for e in pool.entries], builder, policy.tokenizer)
    assert all(d.success for d in demos) and [len(d.steps) for d in demos] == [len(m) for _, m in REACHED]

    # the same states again are duplicates of the pool's tasks
    again, report = write_tasks(cfg, FrozenLakeEnv, [record], None, pool.keys(), [], tmp_path, TaskPool.key)
    assert again == [] and report["removed"]["duplicate"] == 7


def test_hindsight_goal_relabelling_moves_g_onto_each_reached_cell(tmp_path):
    # evolve.hindsight=goal (the default): every reached cell becomes the map's goal G; the task is the ordinary
    # game of the relabelled map, read exactly as a held-out map is (no request line, no T, no request sentence)
    cfg = load_config(overrides=TINY)
    kept, report = write_tasks(cfg, FrozenLakeEnv, [walked()], None, set(), [], tmp_path, TaskPool.key)
    assert [(tuple(t.goal["target"]), t.solution) for t, _, _ in kept] == REACHED
    assert {t.instruction for t, _, _ in kept} == {"Walk from your start to the goal G without falling into a hole."}
    assert report["kept"] == 7 and report["intents"] == {"reach_goal": 7}
    # by hand: G leaves (3, 3) for the reached cell; the last one is G itself, the map unchanged
    assert kept[0][0].goal["map"] == ["SGFF", "HFFF", "FFHH", "FFFF"]
    assert kept[3][0].goal["map"] == ["SFFF", "HFFF", "FGHH", "FFFF"]
    assert kept[-1][0].goal["map"] == SEED0
    pool = TaskPool()
    pool.add(kept, 0)
    env = FrozenLakeEnv(split="synth", tasks_file=str(pool.save(tmp_path / "pool")))
    ordinary = FrozenLakeEnv(split="test")
    assert env.instructions == ordinary.instructions
    for k, (task, _, _) in enumerate(kept):
        assert env.reset(k) == ordinary.load(task.goal["map"])
        for move in task.solution:
            result = env.step(move)
        assert result.done and result.info["success"]
    # the cell form keeps the request line and the sentence about it
    cell = load_config(overrides=TINY + ["evolve.hindsight=cell"])
    kept, _ = write_tasks(cell, FrozenLakeEnv, [walked()], None, set(), [], tmp_path, TaskPool.key)
    pool = TaskPool()
    pool.add(kept, 0)
    env = FrozenLakeEnv(split="synth", tasks_file=str(pool.save(tmp_path / "pool-cell")))
    assert env.reset(0).startswith("Request: Walk from your start to row 1, column 2") and "marked T" in env.instructions


def test_shortest_references_leave_the_explorers_detours_out(tmp_path):
    # evolve.references=shortest: the same reached cells, each reference the shortest path a breadth-first search
    # over replays finds. By hand on SEED0: the walk goes Right, Right, Down, then back Left onto (1, 1), which
    # Right, Down reaches in two; every later cell inherits the detour of two moves. (1, 2) ties (Right, Right,
    # Down or Right, Down, Right): the explorer's own moves stay.
    detour = ["Right", "Right", "Down", "Left", "Down", "Down", "Right", "Right"]  # ends on G at the 8th move
    explored, _ = write_tasks(load_config(overrides=TINY), FrozenLakeEnv, [walked(moves=detour)], None, set(), [],
                              tmp_path, TaskPool.key)
    assert [(tuple(t.goal["target"]), len(t.solution)) for t, _, _ in explored] == [
        ((0, 1), 1), ((0, 2), 2), ((1, 2), 3), ((1, 1), 4), ((2, 1), 5), ((3, 1), 6), ((3, 2), 7), ((3, 3), 8)]
    cfg = load_config(overrides=TINY + ["evolve.references=shortest"])
    kept, report = write_tasks(cfg, FrozenLakeEnv, [walked(moves=detour)], None, set(), [], tmp_path, TaskPool.key)
    r, d = "Right", "Down"
    assert [(tuple(t.goal["target"]), t.solution) for t, _, _ in kept] == [
        ((0, 1), [r]), ((0, 2), [r, r]), ((1, 2), [r, r, d]), ((1, 1), [r, d]), ((2, 1), [r, d, d]),
        ((3, 1), [r, d, d, d]), ((3, 2), [r, d, d, d, r]), ((3, 3), [r, d, d, d, r, r])]
    assert report["kept"] == 8 and not any(report["removed"].values())  # every shortened reference replays
    assert [t.goal["map"] for t, _, _ in kept] == [t.goal["map"] for t, _, _ in explored]  # the same tasks


def test_a_task_whose_reference_fails_is_dropped():
    world = FrozenLakeEnv(split="train")
    good = FROZENLAKE_GAME.template(walked(), world)
    bad = [  # (0-based) (1, 0) is a hole; a reference that ends elsewhere than the cell it names
        {"query": "Walk to row 2, column 1.", "confidence": 1.0, "action_sequence": [{"name": "Down", "arguments": {}}]},
        {"query": "Walk to row 1, column 4.", "confidence": 1.0, "action_sequence": [{"name": "Right", "arguments": {}}]},
    ]
    kept, counts = grid_tasks.check(FROZENLAKE_GAME, world, lambda: FrozenLakeEnv(split="train"),
                              [(0, t) for t in bad + good], duplicate=0.8, seed_offset=10**6, name="frozenlake")
    assert len(kept) == 7 and counts["execution"] == 2 and sum(counts.values()) == 2


def entry(attempts, successes, name="t"):
    task = WorldTask(name, "synth", 1, "reach_cell", name, {"seed": 0}, [])
    return Entry(task, "template", 0, 0, attempts, successes)


def test_the_learnability_draw_by_hand():
    # prior 0.5 with weight 2, floor 0.05: p = (s + 1) / (a + 2), w = p(1 - p) + 0.05
    pool = TaskPool(prior=0.5, prior_weight=2.0, floor=0.05)
    pool.entries = [entry(0, 0, "new"), entry(4, 4, "solved"), entry(4, 0, "hopeless"), entry(2, 1, "half")]
    p = [pool.estimate(e) for e in pool.entries]
    assert p == pytest.approx([0.5, 5 / 6, 1 / 6, 0.5])
    w = [pool.weight(e) for e in pool.entries]
    assert w == pytest.approx([0.30, 5 / 36 + 0.05, 5 / 36 + 0.05, 0.30])
    rng = random.Random(0)
    counts = [0, 0, 0, 0]
    for _ in range(20000):
        counts[pool.draw(1, rng)[0]] += 1
    share_ = [c / 20000 for c in counts]
    assert share_ == pytest.approx([x / sum(w) for x in w], abs=0.015)
    assert sorted(pool.draw(4, rng)) == [0, 1, 2, 3] and len(pool.draw(6, rng)) == 6  # then again
    uniform = TaskPool(curriculum=False)
    uniform.entries = pool.entries
    assert {uniform.weight(e) for e in uniform.entries} == {1.0}
    # the report's histogram of empirical rates s / a: 1.0, 0.0, 0.5; the new task unplayed
    assert pool.histogram() == {"0.0-0.2": 1, "0.2-0.4": 0, "0.4-0.6": 1, "0.6-0.8": 0, "0.8-1.0": 1, "unplayed": 1}


def test_behaviour_cloning_draws_among_the_longest_references():
    pool = TaskPool()
    pool.entries = [Entry(WorldTask(id=str(i), solution=moves), "template", 0, 0) for i, (_, moves) in
                    enumerate(REACHED)]  # references of 1, 2, 2, 3, 4, 5, 6 moves
    assert pool.longest(1 / 3) == [4, 5, 6]  # ceil(7/3) = 3 tasks: 6, 5 and 4 moves
    assert pool.longest(0.5) == [3, 4, 5, 6] and pool.longest(1.0) == list(range(7))
    assert pool.longest(0.2) == [5, 6] and pool.longest(0.01) == [6]
    pool.entries[5].task.solution = pool.entries[6].task.solution  # a tie at the cut is kept whole
    assert pool.longest(0.01) == [5, 6]
    rng = random.Random(0)
    drawn = [i for _ in range(50) for i in pool.draw(3, rng, among=[1, 4])]
    assert set(drawn) == {1, 4} and len(drawn) == 150  # only among them, and again once they are used up
    assert TaskPool().longest(0.5) == [] and pool.draw(2, rng, among=[]) == []


def test_rl_draws_among_the_longest_references_with_rl_longest():
    pool = TaskPool()
    pool.entries = [Entry(WorldTask(id=str(i), solution=moves), "template", 0, 0) for i, (_, moves) in
                    enumerate(REACHED)]  # references of 1, 2, 2, 3, 4, 5, 6 moves
    src = PoolTasks(pool, "frozenlake", list(range(7)), among=pool.longest(1 / 3))
    ids = {t.id for _ in range(20) for t in src.next(2)}
    assert ids == {"4", "5", "6"} and src.metrics()["pool/drawn_from"] == 3.0
    whole = PoolTasks(pool, "frozenlake", list(range(7)))  # rl_longest=1, the default: every task
    assert {t.id for _ in range(40) for t in whole.next(2)} == {str(i) for i in range(7)}
    assert whole.metrics()["pool/drawn_from"] == 7.0


def test_the_imitation_loss_by_hand():
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    mu = torch.tensor([-1.5, -1.0, float("nan")])  # ratios e^0.5 (cut at c = 1), e^-1; the last a demonstration
    loss, st = imitation_loss(logp, mu, torch.full((3,), 0.5), clip=1.0)
    r = [1.0, math.exp(-1.0), 1.0]
    assert float(loss) == pytest.approx(-(0.5 * r[0] * -1.0 + 0.5 * r[1] * -2.0 + 0.5 * r[2] * -0.5) / 3)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-0.5 * x / 3 for x in r])  # no gradient through the ratio
    assert st["imitation/clipped"] == pytest.approx(1 / 3) and st["imitation/ratio"] == pytest.approx(sum(r) / 3)


def test_imitation_rows_carry_their_weights_and_ratios(tmp_path):
    cfg = load_config(overrides=TINY)
    pool = TaskPool()
    kept, _ = write_tasks(cfg, FrozenLakeEnv, [walked()], None, set(), [], tmp_path, TaskPool.key)
    pool.add(kept[:3], 0)
    options = {"split": "synth", "tasks_file": str(pool.save(tmp_path))}
    policy = build_policy(cfg)
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv, **options))
    src = PoolTasks(pool, "frozenlake", [0, 1, 2])
    from selfevolve.rollout.runner import rollout

    trajs = rollout(policy, [make_env(FrozenLakeEnv, **options) for _ in range(3)], [src.task(i) for i in range(3)],
                    builder, max_turns=3, generator=torch.Generator().manual_seed(0))
    traj = trajs[1]
    (row,) = buffer_rows(traj)  # the full-history chat: one row per episode
    assert row["ids"] == traj.steps[-1].prompt_ids + traj.steps[-1].action_ids
    assert row["logprobs"] == [round(x, 6) for s in traj.steps for x in s.logprobs]
    assert sum(row["mask"]) == sum(len(s.action_ids) for s in traj.steps)

    # the buffer: task 0's success from draw 1, task 1's from draw 3 (this update's own draw: not replayed yet)
    pool.entries[0].buffer = [{**row, "draw": 1}]
    pool.entries[1].buffer = [{**buffer_rows(trajs[0])[0], "draw": 3}]
    term = ImitationTerm(policy, weight=0.25, clip=1.0, rows=8, micro_batch_tokens=4096)
    assert term.prepare(pool, draw=3, rng=random.Random(0)) == 1
    (picked,) = term.rows
    assert picked.ids == row["ids"] and picked.old_logprobs == row["logprobs"]

    policy.model.zero_grad(set_to_none=True)
    stats = term(0)
    b = collate([picked], policy.pad_id)
    with torch.no_grad():
        logp, _ = policy.action_logprobs(b["input_ids"], b["attention_mask"], b["loss_mask"])
    ratio = (logp - b["old_logprobs"]).exp().clamp(max=1.0)
    assert stats["imitation/ratio"] == pytest.approx(float(ratio.mean()), rel=1e-4)
    assert stats["loss/imitation"] == pytest.approx(float(-(0.25 * ratio * logp).mean()), rel=1e-4)
    assert stats["imitation/rows"] == 1
    grads = [p.grad for p in policy.trainable_parameters()]
    assert any(g is not None and float(g.abs().sum()) > 0 for g in grads)


def round_trainer(tmp_path, *overrides) -> tuple[TaskPool, PoolTasks, EvolveTrainer]:
    """A round's trainer on a pool of the tasks one walked exploration writes (7 references of 1..6 moves)."""
    pool = TaskPool()
    kept, _ = write_tasks(load_config(overrides=TINY), FrozenLakeEnv, [walked()], None, set(), [], tmp_path,
                          TaskPool.key)
    pool.add(kept, 0)
    tasks_file = pool.save(tmp_path / "round")
    rcfg = load_config(overrides=[*TINY, "env.split=synth", f"env.tasks_file={tasks_file}",
                                  f"train.out_dir={tmp_path / 'train'}", *overrides])
    src = PoolTasks(pool, "frozenlake", list(range(len(pool))))
    return pool, src, EvolveTrainer(rcfg, src)


def test_the_imitation_term_runs_beside_the_rl_loss_in_a_round(tmp_path):
    pool, src, trainer = round_trainer(tmp_path, "train.tasks_per_step=2", "algo.group_size=2",
                                       "evolve.imitation_weight=0.5")
    demo = reference_episodes(FrozenLakeEnv, trainer.env_options, [src.task(0)], [pool.entries[0].task.solution],
                              trainer.builder, trainer.policy.tokenizer)[0]
    pool.entries[0].buffer = [{**buffer_rows(demo)[0], "draw": 0}]  # a demonstration's log-probs are 0: rho = pi
    bc = trainer.clone_references(1, 4, seed=0)
    assert bc["bc/demonstrations"] == 4 and bc["bc/demonstrations_solved"] == 4
    assert bc["bc/tasks"] == 3 and bc["bc/min_moves"] == 4  # the longest third of 7 references of 1..6 moves
    metrics = trainer.train_step()
    assert metrics["imitation/rows"] == 1 and metrics["loss/imitation"] > 0 and "loss/policy" in metrics
    assert src.draws == 1 and sum(e.attempts for e in pool.entries) == 4  # 2 tasks x 2 rollouts counted


def test_cloning_takes_bc_minibatches_optimizer_steps_a_step(tmp_path):
    """``evolve.bc_minibatches=2``: one cloning step on 4 demonstrations is two optimizer steps of 2 each."""
    _, _, trainer = round_trainer(tmp_path, "evolve.bc_minibatches=2")
    assert trainer.clone_references(1, 4, seed=0)["bc/demonstrations"] == 4
    assert {int(s["step"]) for s in trainer.optimizer.state.values()} == {2}


def test_cloning_runs_at_bc_lr_and_rl_keeps_algo_lr(tmp_path, monkeypatch):
    """``evolve.bc_lr``: the cloning's optimizer steps run at it, and the optimizer is back at ``algo.lr`` after."""
    import selfevolve.train.warm_start as ws

    _, _, trainer = round_trainer(tmp_path, "evolve.bc_minibatches=2", "algo.lr=1e-4", "evolve.bc_lr=4e-4")
    seen = []

    def spy(*args, **kwargs):
        seen.append({g["lr"] for g in trainer.optimizer.param_groups})
        return real(*args, **kwargs)

    real = ws.ppo_update
    monkeypatch.setattr(ws, "ppo_update", spy)
    trainer.clone_references(2, 4, seed=0)
    assert seen == [{4e-4}, {4e-4}]  # one clone_step call a cloning step
    assert {g["lr"] for g in trainer.optimizer.param_groups} == {1e-4}


def test_rounds_share_the_updates():
    assert [share(20, 3, r) for r in range(3)] == [6, 7, 7]
    assert [share(10, 3, r) for r in range(3)] == [3, 3, 4] and [share(2, 3, r) for r in range(3)] == [0, 1, 1]


def test_rl_from_round_leaves_the_earlier_rounds_to_cloning():
    # 20 updates over rounds 1 and 2 of 3: 10 each; over rounds 2.. of 4: 10 each; round 0 of 1: all 20
    assert [rl_steps(20, 3, 1, r) for r in range(3)] == [0, 10, 10]
    assert [rl_steps(20, 4, 2, r) for r in range(4)] == [0, 0, 10, 10]
    assert [rl_steps(20, 3, 0, r) for r in range(3)] == [share(20, 3, r) for r in range(3)]
    assert rl_steps(20, 1, 0, 0) == 20
    with pytest.raises(ConfigError, match=r"evolve\.rl_from_round=3 .* below evolve\.rounds=3 \(0 to 2\)"):
        load_config(overrides=["evolve.rl_from_round=3"])


EVOLVE = [*TINY, "env.size=3", "evolve.rounds=2", "train.steps=4", "train.tasks_per_step=2", "algo.group_size=2",
          "questioning.explorations=3", "questioning.steps=4", "eval.episodes=3", "evolve.bc_steps=2",
          "evolve.bc_tasks=3", "env.max_turns=3", "evolve.validation_explorations=4", "evolve.validation_min_moves=2"]


def test_two_rounds_end_to_end_and_a_resume_mid_round_gives_the_same_run(tmp_path):
    straight = tmp_path / "straight"
    START = [*EVOLVE, "evolve.start_eval=true"]  # the held-out evaluation before round 0 too (off by default)
    summary = Evolver(load_config(overrides=[*START, f"train.out_dir={straight}"])).run()
    assert summary["rounds"] == 2 and [p["point"] for p in summary["curve"]] == ["start", "round 0", "round 1"]
    state = json.loads((straight / "evolve.json").read_text())
    for rec in state["rounds"]:
        assert rec["stages"] == ["explored", "written", "trained"]
        assert rec["explore"]["valid_answers"] == rec["explore"]["answers"]  # answers masked to the moves
        assert rec["write"]["kept"] > 0 and rec["train"]["updates"] == 2 and "eval/success" in rec["eval"]
    # round 1's pool holds round 0's tasks (with their counts) and its own; round 0's explored seeds 0-2, round 1's 3-5
    r0 = [json.loads(x) for x in (straight / "round-0" / "pool_end.jsonl").read_text().splitlines()]
    r1 = [json.loads(x) for x in (straight / "round-1" / "pool.jsonl").read_text().splitlines()]
    assert r1[:len(r0)] == r0 and len(r1) == len(r0) + state["rounds"][1]["write"]["kept"]
    assert sum(e["attempts"] for e in r0) == 2 * 2 * 2  # 2 updates x 2 tasks x 2 rollouts
    assert state["rounds"][1]["explore"]["sandbox_seeds"] == [3, 4, 5]
    page = (straight / "evolve.md").read_text()
    assert "0 human-written training tasks" in page and "## Round 1" in page and (straight / "evolve.png").is_file()
    # where the time went: every stage timed (the cloning, both evaluations, the validation set when kept best)
    assert state["start_eval_seconds"] > 0 and "## Where the time went" in page
    assert all(rec["bc"]["bc/seconds"] > 0 and rec["train"]["time/eval"] > 0 for rec in state["rounds"])
    train1 = load_config(str(straight / "round-1" / "train" / "config.yaml"))
    assert (train1.env.split, train1.train.warm_start_steps) == ("synth", 0)
    # round 1 continues round 0's adapter and, by default (evolve.carry_optimizer), its optimizer state
    assert train1.model.init_from == str(straight / "round-0" / "train") and train1.model.init_optimizer

    # the viewer shows the rounds as one run: round 1's steps follow round 0's, each marked with its round
    view = load_run(straight)
    assert view.summary["steps"] == [1, 2, 3, 4] and [f for f in view.summary["facts"] if f[0].startswith("round")] \
        == [["round 0", "steps 0–2"], ["round 1", "steps 2–4"]]
    assert {(m["step"], m["round"]) for m in view.summary["metrics"] if m["step"] in (2, 4)} >= {(2, 0), (4, 1)}
    assert {t["flags"]["round"] for t in view.steps[3]} == {1}

    # a crash after round 1's first update, in the same folder: its second checkpoint never written, the round
    # not marked trained; what the uninterrupted run wrote is kept aside to compare
    ckpts = straight / "round-1" / "train" / "checkpoints"
    adapter = load_file(str(ckpts / "step-2" / "adapter.safetensors"))
    pool_end = (straight / "round-1" / "pool_end.jsonl").read_text()
    metrics = [json.loads(x) for x in (straight / "round-1" / "train" / "metrics.jsonl").read_text().splitlines()]
    shutil.rmtree(ckpts / "step-2")
    (ckpts / "latest").write_text("step-1")
    crashed = json.loads((straight / "evolve.json").read_text())
    crashed["rounds"][1]["stages"].remove("trained")
    (straight / "evolve.json").write_text(json.dumps(crashed))
    for f in (straight / "round-1").glob("pool_end*"):
        f.unlink()
    with pytest.raises(Exception, match="already holds an evolve run"):
        Evolver(load_config(overrides=[*START, f"train.out_dir={straight}"]))
    again = Evolver(load_config(overrides=[*START, f"train.out_dir={straight}", "train.resume=true"])).run()
    assert again["curve"] == summary["curve"]
    b = load_file(str(ckpts / "step-2" / "adapter.safetensors"))
    assert adapter.keys() == b.keys() and all(torch.allclose(adapter[k], b[k], atol=1e-6) for k in adapter)
    assert (straight / "round-1" / "pool_end.jsonl").read_text() == pool_end
    mb = [json.loads(x) for x in (straight / "round-1" / "train" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in mb] == [0, 1, 2]
    assert metrics[-1]["reward/mean"] == pytest.approx(mb[-1]["reward/mean"]) and \
        metrics[-1]["loss/policy"] == pytest.approx(mb[-1]["loss/policy"], rel=1e-5, abs=1e-7)

    # a resume with another evolve setting is refused, naming it
    with pytest.raises(Exception, match=r"(?s)its evolve\.imitation_weight settings differ.*add: "
                                         r"evolve\.imitation_weight=0\.1\)"):
        Evolver(load_config(overrides=[*START, f"train.out_dir={straight}", "train.resume=true",
                                       "evolve.imitation_weight=0.3"]))
    # a run saved before a setting existed ran with its default: resuming it with the default is accepted
    state = json.loads((straight / "evolve.json").read_text())
    del state["config"]["evolve"]["rl_longest"]
    (straight / "evolve.json").write_text(json.dumps(state))
    Evolver(load_config(overrides=[*START, f"train.out_dir={straight}", "train.resume=true"]))
    with pytest.raises(Exception, match=r"its evolve\.rl_longest settings differ"):
        Evolver(load_config(overrides=[*START, f"train.out_dir={straight}", "train.resume=true",
                                       "evolve.rl_longest=0.5"]))
    # one saved before evolve.acting_precision existed explored in the model's own precision, and resumes so
    del state["config"]["evolve"]["acting_precision"]
    (straight / "evolve.json").write_text(json.dumps(state))
    resumed = Evolver(load_config(overrides=[*START, f"train.out_dir={straight}", "train.resume=true"]))
    assert resumed.cfg.evolve.acting_precision == "same"


def test_exploring_and_validation_compute_in_the_updates_precision_the_held_out_evaluation_in_the_models(
        tmp_path, monkeypatch):
    """evolve.acting_precision=update (the default): under model.matmul_dtype=bf16_update the frozen body's
    products are bf16 while exploring and scoring the validation set, fp32 in the held-out evaluation (and the RL
    rollouts); =same keeps fp32 in both. No evaluation before round 0 unless evolve.start_eval."""
    import selfevolve.evolve.loop as loop
    from selfevolve.models.matmul_precision import frozen_linears
    from selfevolve.train.trainer import Trainer

    seen = []

    def spy(stage, real, policy_at):
        def call(*args, **kwargs):
            policy = policy_at(args)
            seen.append((stage, frozen_linears(policy.model)[0].weight.dtype))
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(loop.hindsight, "explore_round", spy("explore", loop.hindsight.explore_round, lambda a: a[2]))
    monkeypatch.setattr(loop.validation, "score", spy("validation", loop.validation.score, lambda a: a[2]))
    monkeypatch.setattr(Trainer, "evaluate", spy("held out", Trainer.evaluate, lambda a: a[0].policy))
    for precision, acting in (("update", torch.bfloat16), ("same", torch.float32)):
        seen.clear()
        out = tmp_path / precision
        summary = Evolver(load_config(overrides=[*EVOLVE, "model.matmul_dtype=bf16_update", "evolve.rounds=1",
                                                 f"evolve.acting_precision={precision}",
                                                 f"train.out_dir={out}"])).run()
        assert set(seen) == {("explore", acting), ("validation", acting), ("held out", torch.float32)}, \
            (precision, seen)
        assert [p["point"] for p in summary["curve"]] == ["round 0"]
        assert "start_eval" not in json.loads((out / "evolve.json").read_text())


def test_keep_best_scores_each_round_on_its_validation_tasks_and_keeps_the_best(tmp_path):
    """evolve.keep=best (the default): validation tasks written once from random explorations of sandboxes no
    round explores, each at least validation_min_moves long; every round scored on all of them; the summary, the
    command's line and the page keep the round with the highest score."""
    out = tmp_path / "best"
    summary = Evolver(load_config(overrides=[*EVOLVE, f"train.out_dir={out}"])).run()
    state = json.loads((out / "evolve.json").read_text())
    val = state["validation"]
    assert val["sandboxes"] == [100_000, 100_003] and val["min_moves"] == 2 and val["tasks"] > 0
    tasks = [json.loads(x) for x in (out / "validation" / "tasks.jsonl").read_text().splitlines()]
    assert len(tasks) == val["tasks"] and all(len(t["solution"]) >= 2 for t in tasks)
    assert {t["goal"]["seed"] for t in tasks} <= set(range(100_000, 100_004))  # never a round's sandbox (0-5)
    maps = FrozenLakeEnv(size=3, split="train")
    explored = set()
    for seed in range(6):  # the 2 rounds x 3 explorations' sandboxes: no validation map is one of theirs
        maps.reset(seed)
        explored.add(maps.content_key())
    for seed in {t["goal"]["seed"] for t in tasks}:
        maps.reset(seed)
        assert maps.content_key() not in explored
    same = 0
    for seed in range(100_000, 100_004):
        maps.reset(seed)
        same += maps.content_key() in explored
    assert val["left_out"] == same
    scores = [r["validation"]["success"] for r in state["rounds"]]
    played = {r["validation"]["tasks"] for r in state["rounds"]}  # each distinct map once (eval_tasks)
    assert len(played) == 1 and 0 < played.pop() <= val["tasks"]
    k = 1 if scores[1] >= scores[0] else 0  # the latest on a tie
    assert summary["kept_round"] == k and summary["final"] == state["rounds"][k]["eval"]["eval/success"]
    assert summary["last"] == state["rounds"][1]["eval"]["eval/success"]
    page = (out / "evolve.md").read_text()
    assert f"**Kept: round {k}**" in page and "validation, to choose the round kept" in page
    assert f"- validation: success {scores[1]:.3f} on " in page
    # the folder overwritten by a run that keeps its last round: the old validation set goes with the old rounds
    Evolver(load_config(overrides=[*EVOLVE, "evolve.rounds=1", "train.steps=1", "evolve.keep=last",
                                   "train.overwrite=true", f"train.out_dir={out}"])).run()
    assert not (out / "validation").exists() and not (out / "round-1").exists()


def test_validation_tasks_are_written_by_the_template_whatever_evolve_writer_says(tmp_path):
    """evolve.writer=llm asks the policy to phrase the pool's tasks; the validation set is written without any
    model (the template), and with evolve.validation_min_moves above every reference the set is empty."""
    from selfevolve.evolve import validation

    cfg = load_config(overrides=[*EVOLVE, "evolve.writer=llm"])
    written = validation.build(cfg, FrozenLakeEnv, tmp_path / "llm")
    tasks = [json.loads(x) for x in (tmp_path / "llm" / "validation" / "tasks.jsonl").read_text().splitlines()]
    assert written["tasks"] == len(tasks) > 0
    assert all(t["instruction"] == "Walk from your start to the goal G without falling into a hole." for t in tasks)
    cfg = load_config(overrides=[*EVOLVE, "evolve.validation_min_moves=99"])
    assert validation.build(cfg, FrozenLakeEnv, tmp_path / "none")["tasks"] == 0


def test_the_round_kept_by_hand():
    from selfevolve.evolve.report import best_round

    def rounds(*scores):
        return [{"round": i, **({"validation": {"success": s}} if s is not None else {})} for i, s in enumerate(scores)]

    assert best_round(rounds(0.5, 0.25, 0.5)) == 2  # a tie: the latest
    assert best_round(rounds(0.1, 0.75, 0.25)) == 1
    assert best_round(rounds(None, 0.0)) == 1 and best_round(rounds(None, None)) is None
    # what the page says when no round is kept by its score
    from selfevolve.evolve.report import kept_line

    state = {"config": {"evolve": {}}, "rounds": [{"round": 0, "stages": ["trained"], "eval": {"eval/success": 0.5}}]}
    assert "the run began before `evolve.keep`" in kept_line(state)  # resumed from a run made before the option
    state["config"]["evolve"]["keep"] = "last"
    assert "(`evolve.keep=last`)" in kept_line(state)
    state["validation"] = {"skipped": "why"}
    assert kept_line(state) == "**Kept: the last round** (why)."


def test_where_the_time_went_by_hand():
    from selfevolve.evolve.report import seconds_by_stage, time_table

    rnd = {"round": 0, "stages": ["explored", "written", "trained"], "explore": {"seconds": 30.0},
           "write": {"seconds": 1.0}, "bc": {"bc/seconds": 40.0}, "validation": {"success": 0.5, "seconds": 9.0},
           "train": {"seconds": 100.0, "time/rollout": 20.0, "time/update": 25.0, "time/eval": 10.0}}
    state = {"env": "frozenlake", "config": {}, "start_eval_seconds": 12.0, "validation": {"seconds": 3.0},
             "rounds": [rnd, {**rnd, "round": 1}, {"round": 2, "stages": ["explored"], "explore": {"seconds": 7.0}}]}
    got = dict(seconds_by_stage(state))  # round 2 is not trained yet: not counted
    assert got["held-out evaluation before round 0"] == 12 and got["writing the validation set"] == 3
    assert got["exploring"] == 60 and got["behaviour cloning"] == 80 and got["RL updates"] == 50
    assert got["held-out evaluation after each round"] == 20 and got["validation score after each round"] == 18
    assert got["the rest of training (loading, checkpoints)"] == 2 * (100 - 40 - 20 - 25 - 10)
    assert sum(got.values()) == 12 + 3 + 60 + 2 + 2 * 100 + 18 == 295
    table = time_table(state)
    assert "| behaviour cloning | 80 | 27% |" in table and table[-1] == "| all stages | 295 | |"  # 80 / 295: 27.1 %
    assert time_table({"rounds": []}) == []  # nothing timed yet: no table


def test_keep_last_writes_no_validation_and_a_tool_world_keeps_its_last_round(tmp_path):
    out = tmp_path / "last"
    summary = Evolver(load_config(overrides=[*EVOLVE, "evolve.rounds=1", "train.steps=1", "evolve.keep=last",
                                             f"train.out_dir={out}"])).run()
    assert summary["kept_round"] is None and summary["final"] == summary["last"]
    assert not (out / "validation").exists() and "validation" not in json.loads((out / "evolve.json").read_text())
    assert "**Kept: the last round** (`evolve.keep=last`)." in (out / "evolve.md").read_text()
    from selfevolve.envs.tools.shop import ShopEnv
    from selfevolve.evolve import validation

    assert validation.build(load_config(overrides=[*TINY, "env.name=shop"]), ShopEnv, tmp_path) == \
        {"skipped": validation.NO_GAME}
    with pytest.raises(ConfigError, match=r"eval\.seed_offset=100010 makes the validation sandboxes"):
        Evolver(load_config(overrides=[*TINY, "eval.seed_offset=100010", f"train.out_dir={tmp_path / 'offset'}"]))
    with pytest.raises(ConfigError, match="reach the validation's"):
        Evolver(load_config(overrides=[*TINY, "evolve.rounds=100", "questioning.explorations=1001",
                                       f"train.out_dir={tmp_path / 'many'}"]))


def test_carry_optimizer_continues_the_previous_rounds_optimizer_from_round_1(tmp_path):
    assert load_config(overrides=EVOLVE).evolve.carry_optimizer  # the default since 2026-11-29
    for carry in (True, False):
        evolver = Evolver(load_config(overrides=[*EVOLVE, f"evolve.carry_optimizer={str(carry).lower()}",
                                                 f"train.out_dir={tmp_path / 'run'}"]))
        r0, r1 = (evolver._round_config(r, tmp_path / "run" / f"round-{r}") for r in (0, 1))
        assert (r0.model.init_from, r0.model.init_optimizer) == (None, False)  # round 0: a fresh adapter and optimizer
        # round 1: round 0's adapter, and its optimizer state only when carried
        assert (r1.model.init_from, r1.model.init_optimizer) == (str(tmp_path / "run" / "round-0" / "train"), carry)


def test_a_round_before_rl_from_round_clones_and_evaluates_without_updates(tmp_path):
    out = tmp_path / "late"
    summary = Evolver(load_config(overrides=[*EVOLVE, "evolve.rl_from_round=1", f"train.out_dir={out}"])).run()
    assert [p["point"] for p in summary["curve"]] == ["round 0", "round 1"]
    r0, r1 = json.loads((out / "evolve.json").read_text())["rounds"]
    assert r0["bc"]["bc/steps"] == 1 and r1["bc"]["bc/steps"] == 1  # cloning in both rounds (2 steps over 2)
    assert r0["train"]["updates"] == 0 and r1["train"]["updates"] == 4  # every RL update in round 1
    assert "eval/success" in r0["eval"] and "eval/success" in r1["eval"]
    assert "- RL: 4 updates on 16 rollouts of pool tasks;" in (out / "evolve.md").read_text()  # 4 x 2 tasks x 2
    logged = [json.loads(x) for x in (out / "round-0" / "train" / "eval_trajectories.jsonl").read_text().splitlines()]
    assert len(logged) == 3 and {r["step"] for r in logged} == {0}  # round 0's greedy episodes, for the viewer
    r0_pool = [json.loads(x) for x in (out / "round-0" / "pool_end.jsonl").read_text().splitlines()]
    assert sum(e["attempts"] for e in r0_pool) == 0  # no rollout played a pool task in round 0
    assert load_config(str(out / "round-1" / "train" / "config.yaml")).model.init_from == str(out / "round-0" / "train")


def test_without_rl_every_round_clones_and_evaluates_and_no_rollout_plays_the_pool(tmp_path):
    """evolve.rl=false: train.steps is not used (4 here, which would be 2 + 2 updates); both rounds clone (1 step
    each) and evaluate, none updates, no pool task is played, and the report says the run had no RL."""
    out = tmp_path / "clone-only"
    summary = Evolver(load_config(overrides=[*EVOLVE, "evolve.rl=false", f"train.out_dir={out}"])).run()
    assert [p["point"] for p in summary["curve"]] == ["round 0", "round 1"]
    rounds = json.loads((out / "evolve.json").read_text())["rounds"]
    assert [r["bc"]["bc/steps"] for r in rounds] == [1, 1] and [r["train"]["updates"] for r in rounds] == [0, 0]
    assert [r["train"]["rollouts"] for r in rounds] == [0, 0] and all("eval/success" in r["eval"] for r in rounds)
    assert all(r["train"]["time/eval"] > 0 for r in rounds)  # the evaluation outside the trainer's loop is timed too
    end = [json.loads(x) for x in (out / "round-1" / "pool_end.jsonl").read_text().splitlines()]
    assert len(end) > 0 and sum(e["attempts"] for e in end) == 0
    assert "- RL: **none** (`evolve.rl=false`" in (out / "evolve.md").read_text()
    assert load_config(str(out / "round-1" / "train" / "config.yaml")).model.init_from == str(out / "round-0" / "train")
    assert [load_config(str(out / f"round-{r}" / "train" / "config.yaml")).train.steps for r in (0, 1)] == [0, 0]
    # without RL, evolve.rl_from_round names no round's updates, so any value passes the check
    assert load_config(overrides=["evolve.rl=false", "evolve.rl_from_round=5"]).evolve.rl_from_round == 5


def test_the_command_refuses_bad_input_in_one_line(tmp_path):
    runner = CliRunner()
    r = runner.invoke(cli.app, ["evolve", "model.name=tiny", "evolve.rounds=0"])
    assert r.exit_code == 2 and "evolve.rounds" in r.output and "Traceback" not in r.output
    r = runner.invoke(cli.app, ["evolve", "model.name=tiny", "env.slippery=true", f"train.out_dir={tmp_path}"])
    assert r.exit_code == 2 and "slippery" in r.output
    r = runner.invoke(cli.app, ["evolve", "model.name=tiny", "env.name=shop", "evolve.explorer=random",
                                f"train.out_dir={tmp_path}"])
    assert r.exit_code == 2 and "evolve.explorer=random" in r.output and "tool world" in r.output


def test_the_random_explorer_moves_among_the_masked_moves_without_a_model(tmp_path):
    """evolve.explorer=random: explorations of Sokoban training rooms with no model, each move one the masked
    explorer may answer at that point (never into a wall the board shows), the same for the same seed; their
    hindsight tasks verify by replay like the policy's."""
    from selfevolve.envs import SokobanEnv
    from selfevolve.evolve import hindsight
    from selfevolve.questioning.sokoban import SokobanExploration

    cfg = load_config(overrides=[*TINY, "env.name=sokoban", "evolve.explorer=random", "questioning.explorations=40",
                                 "questioning.steps=10"])
    records = hindsight.explore_round(cfg, SokobanEnv, None, None, first_seed=5, seed=3)
    assert [r.seed for r in records] == list(range(5, 45))
    assert records == hindsight.explore_round(cfg, SokobanEnv, None, None, first_seed=5, seed=3)
    assert records != hindsight.explore_round(cfg, SokobanEnv, None, None, first_seed=5, seed=4)
    for record in records:  # replayed: every move was among the allowed ones when it was drawn
        env = SokobanExploration(SokobanEnv(split="train"), cfg.questioning.breadth_steps, 10)
        env.reset(record.seed)
        for turn in record.turns:
            assert turn["call"] in env.allowed_moves()
            env.step(turn["call"])
        assert env.log == record.turns and 1 <= len(record.turns) <= 10
    kept, report = write_tasks(cfg, SokobanEnv, records, None, set(), [], tmp_path, TaskPool.key)
    assert kept and report["kept"] == len(kept) == report["candidates"] - sum(report["removed"].values())
    assert report["removed"]["execution"] == 0 and report["removed"]["unverifiable"] == 0
    # unmasked, every move of the game may be drawn: some walk into a wall the board shows
    free = load_config(overrides=[*TINY, "env.name=sokoban", "evolve.explorer=random",
                                  "evolve.explore_constrained=false", "questioning.explorations=40",
                                  "questioning.steps=10"])
    from selfevolve.questioning.grid import STEP

    into_walls = 0
    for record in hindsight.explore_round(free, SokobanEnv, None, None, first_seed=5, seed=3):
        room = SokobanEnv(split="train")
        room.reset(record.seed)
        here = room.player
        for turn in record.turns:
            for move, cell in zip(turn["moves"], turn["path"]):
                into_walls += (here[0] + STEP[move][0], here[1] + STEP[move][1]) in room.walls
                here = tuple(cell)
    assert into_walls > 0
    # a direct call on a tool world is refused as the command refuses it, before anything runs
    from selfevolve.envs import ShopEnv
    from selfevolve.errors import ConfigError

    shop = load_config(overrides=[*TINY, "env.name=shop", "evolve.explorer=random"])
    with pytest.raises(ConfigError, match="evolve.explorer=random.*tool world"):
        hindsight.explore_round(shop, ShopEnv, None, None, first_seed=0, seed=0)
    # the run's report says whose explorations they were
    from selfevolve.evolve import report

    state = {"env": "sokoban", "rounds": [], "config": {"evolve": {"explorer": "random", "explore_constrained": True}}}
    assert any("uniform random moves** among those the masked explorer may answer" in x for x in report.saw(state))
    state["config"]["evolve"]["explore_constrained"] = False
    assert any("among all the game's" in x for x in report.saw(state))
    state["config"]["evolve"]["explorer"] = "policy"
    assert not any("random" in x for x in report.saw(state))


def test_tool_world_hindsight_tasks_look_ups_and_changes_verified_by_replay(tmp_path):
    """The shop: what a scripted exploration's calls returned becomes look-up tasks, and a change becomes a task
    whose verifier is the database rows it changed; each is replayed in a fresh world before it is kept."""
    from selfevolve.questioning.explore import Exploration
    from selfevolve.envs.tools.shop import ShopEnv
    from selfevolve.envs.tools.calls import format_tool_call

    env = Exploration(ShopEnv(split="train"), 4, 8, "users")
    env.reset(0)
    calls = [("get_user", {"user_id": "U001"}), ("get_order", {"order_id": "W7793"}),
             ("cancel_order", {"order_id": "W1089", "reason": "no longer needed"}),
             ("cancel_order", {"order_id": "W1875", "reason": "ordered by mistake"})]  # a held-out customer's
    for name, args in calls:
        assert env.step(format_tool_call(name, args)).info["valid_action"]
    record = ExplorationRecord(seed=0, turns=env.log)
    cfg = load_config(overrides=[*TINY, "env.name=shop"])
    kept, report = write_tasks(cfg, ShopEnv, [record], None, set(), [], tmp_path, TaskPool.key)
    by_call = {t.solution[0]["name"]: t for t, _, _ in kept}
    assert set(by_call) == {"get_user", "get_order", "cancel_order"} and report["kept"] == 3
    assert report["removed"]["held_out"] == 1 and sum(report["removed"].values()) == 1
    assert by_call["get_user"].solution[-1] == {"name": "finish", "arguments": {"answer": "Samir Cohen"}}
    assert by_call["get_order"].goal == {"answer": "processed", "changes": {}}
    change = by_call["cancel_order"]
    assert change.instruction.startswith("Please cancel a pending order") and change.goal["changes"]
    # played as a pool task, each reference solves its task; finishing without the change does not
    pool = TaskPool()
    pool.add(kept, 0)
    world = ShopEnv(split="synth", tasks_file=str(pool.save(tmp_path / "pool")))
    for e in pool.entries:
        world.load(e.task)
        for c in e.task.solution:
            result = world.step(format_tool_call(c["name"], c["arguments"]))
        assert result.info["success"]
    world.load(pool.entries[[e.task.solution[0]["name"] for e in pool.entries].index("cancel_order")].task)
    assert not world.step(format_tool_call("finish", {"answer": change.solution[-1]["arguments"]["answer"]})).info["success"]


def test_the_explorers_mask_by_hand():
    """Training seed 0's map (SEED0): the masked explorer may answer with the hint's moves less those onto a
    hole the board shows."""
    env = GameExploration(FrozenLakeEnv(split="train"), breadth_steps=2, max_turns=8)
    env.reset(0)
    # (0-based cells) at the start (0, 0), in breadth: every move untried; Down is the hole at (1, 0)
    assert env.allowed_moves() == ["Left", "Right", "Up"]
    env.step("Right")  # at (0, 1), still in breadth: all four untried from here, none onto a hole
    assert env.allowed_moves() == ["Left", "Down", "Right", "Up"]
    env.step("Down")  # at (1, 1), in depth: Left is the hole (1, 0), Up goes back to (0, 1): Down and Right remain
    assert env.allowed_moves() == ["Down", "Right"]
    assert not env.over and env.step("Down").done is False


def test_one_round_on_sokoban(tmp_path):
    """Sokoban's hindsight tasks (walk to a cell, push the box to a cell) are played by their pool seeds; the
    masked explorer never walks into a wall the board shows."""
    out = tmp_path / "sokoban"
    summary = Evolver(load_config(overrides=[*TINY, "env.name=sokoban", "evolve.rounds=1", "train.steps=1",
                                             "train.tasks_per_step=2", "algo.group_size=2", "questioning.explorations=3",
                                             "questioning.steps=5", "eval.episodes=2", "evolve.bc_steps=1",
                                             "evolve.bc_tasks=3", "evolve.rl_longest=0.5",
                                             f"train.out_dir={out}"])).run()
    rec = json.loads((out / "evolve.json").read_text())["rounds"][0]
    assert summary["rounds"] == 1 and rec["write"]["kept"] > 0 and rec["bc"]["bc/demonstrations_solved"] == 3
    start = TaskPool()
    start.load(out / "round-0", "pool")  # RL drew among the longer half of the round's pool (evolve.rl_longest)
    assert rec["train"]["pool/drawn_from"] == len(start.longest(0.5))
    assert rec["explore"]["valid_answers"] == rec["explore"]["answers"]
    assert set(rec["write"]["intents"]) <= {"reach_cell", "move_box", "solve_room"}
    from selfevolve.envs import SokobanEnv
    from selfevolve.questioning.grid import STEP

    for line in (out / "round-0" / "explorations.jsonl").read_text().splitlines():
        record = json.loads(line)
        room = SokobanEnv(split="train")
        room.reset(record["seed"])
        here = room.player
        for turn in record["turns"]:
            for move, cell in zip(turn["moves"], turn["path"]):
                assert (here[0] + STEP[move][0], here[1] + STEP[move][1]) not in room.walls
                here = tuple(cell)


def test_a_round_with_the_random_explorer(tmp_path):
    """evolve.explorer=random through the command's own loop: the round records its explorer, the pool fills
    from the random explorations, and the report says whose moves they were."""
    out = tmp_path / "rx"
    Evolver(load_config(overrides=[*TINY, "env.name=sokoban", "evolve.explorer=random", "evolve.rounds=1",
                                   "train.steps=1", "train.tasks_per_step=2", "algo.group_size=2",
                                   "questioning.explorations=24", "eval.episodes=2", "evolve.bc_steps=1",
                                   "evolve.bc_tasks=2", f"train.out_dir={out}"])).run()
    rec = json.loads((out / "evolve.json").read_text())["rounds"][0]
    assert rec["explore"]["explorer"] == "random" and rec["explore"]["explorations"] == 24
    assert rec["write"]["kept"] > 0 and rec["pool"]["tasks"] == rec["write"]["kept"]
    assert "uniform random moves" in (out / "evolve.md").read_text()


def test_the_frozenlake_oracle_measures_a_pool_tasks_target(tmp_path):
    """reward.attribution=oracle inside the loop: a synthesized task's goal is its target cell, G a dead end."""
    from selfevolve.rewards.oracle import GOOD, Oracle, lake_distances

    to_g = lake_distances(SEED0)
    assert to_g[(0, 0)] == 6 and to_g[(0, 1)] == 5  # (0, 1) (1, 1) (2, 1) (3, 1) (3, 2) (3, 3)
    to_cell = lake_distances(SEED0, (0, 2))
    assert to_cell[(0, 0)] == 2 and to_cell[(0, 2)] == 0 and (3, 3) not in to_cell and (1, 0) not in to_cell
    cfg = load_config(overrides=TINY)
    kept, _ = write_tasks(cfg, FrozenLakeEnv, [walked()], None, set(), [], tmp_path, TaskPool.key)
    pool = TaskPool()
    pool.add(kept, 0)
    options = {"split": "synth", "tasks_file": str(pool.save(tmp_path))}
    policy = build_policy(cfg)
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv, **options))
    src = PoolTasks(pool, "frozenlake", list(range(len(pool))))
    demos = reference_episodes(FrozenLakeEnv, options, [src.task(i) for i in range(len(pool))],
                               [e.task.solution for e in pool.entries], builder, policy.tokenizer)
    oracle = Oracle(make_env(FrozenLakeEnv, **options))
    # on this walk every step of every reference brings its own target closer (measured to G, the second
    # Right of "walk to row 1, column 3" would be BAD: from (0, 1) G is 5 away, from (0, 2) 6)
    assert all(x["label"] == GOOD for d in demos for x in oracle.labels(d))
