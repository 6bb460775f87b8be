"""Tests of the built-in text environments (FrozenLake, Sokoban) and the env registry. Fast: no model."""

from __future__ import annotations

import pytest

from selfevolve.envs import (
    ENVS,
    FrozenLakeEnv,
    SokobanEnv,
    StepResult,
    TextEnv,
    env_options,
    make_env,
    solve,
)
from selfevolve.envs.games.moves import parse_moves
from selfevolve.envs.games.sokoban import parse_room
from selfevolve.envs.games.sokoban_rooms import describe_positions, offset
from selfevolve.errors import ConfigError

# S F F F      P _ _ _
# H F H F  ->  O _ O _
# F F F H      _ _ _ O
# H F F G      O _ _ G
LAKE = ["SFFF", "HFHF", "FFFH", "HFFG"]
INVALID_TEXTS = [
    "", "   ", "Jump", "left!!x", "Left Up", "→", "左", "Léft", "Left\u200b", "\x00", "up" * 1000, "1", ".",
]


# gymnasium's classic game: one move per turn, no shaping (the library defaults add both, for learnability)
CLASSIC = {"moves_per_turn": 1, "progress_reward": 0.0, "bump_penalty": 0.0, "max_turns": 8, "hints": False}


def lake(**options) -> FrozenLakeEnv:
    env = FrozenLakeEnv(**{**CLASSIC, **options})
    env.load(LAKE)
    return env


# ---------------------------------------------------------------------------------------------- FrozenLake
def test_frozenlake_render_and_moves():
    env = lake()
    assert env.render() == "P _ _ _\nO _ O _\n_ _ _ O\nO _ _ G"
    assert env.state_key() == "0,0"
    assert env.progress() == pytest.approx(0.0)
    r = env.step("Right")
    assert isinstance(r, StepResult)
    obs, reward, done, info = r
    assert obs.splitlines()[0] == "_ P _ _"
    assert (reward, done) == (0.0, False)
    assert info == {"success": False, "valid_action": True, "moves": ["Right"]}
    assert env.state_key() == "0,1"
    # case, whitespace and punctuation are tolerated
    for text, key in [(" down. ", "1,1"), ("DOWN", "2,1"), ("*right*", "2,2")]:
        assert env.step(text).info["valid_action"]
        assert env.state_key() == key
    assert env.progress() == pytest.approx(1 - 2 / 6)


def test_frozenlake_off_grid_keeps_position():
    env = lake()
    for move in ("Left", "Up"):
        r = env.step(move)
        assert r.info["valid_action"] and r.reward == 0.0 and not r.done
        assert env.state_key() == "0,0"


def test_frozenlake_hole_ends_episode():
    env = lake()
    r = env.step("Down")
    assert r.done and r.reward == 0.0
    assert r.info["success"] is False and r.info["valid_action"] is True
    assert r.observation.splitlines()[1] == "X _ O _"
    assert env.state_key() == "1,0,done"
    after = env.step("Right")  # a finished episode does not move
    assert after.done and after.reward == 0.0 and env.state_key() == "1,0,done"


def test_frozenlake_goal():
    env = lake()
    rewards = [env.step(m).reward for m in ["Right", "Down", "Down", "Right", "Down"]]
    assert rewards == [0.0] * 5
    r = env.step("Right")
    assert r.reward == 1.0 and r.done and r.info["success"] is True
    assert r.observation.splitlines()[3] == "O _ _ √"
    assert env.progress() == pytest.approx(1.0)


@pytest.mark.parametrize("text", INVALID_TEXTS)
def test_frozenlake_invalid_actions(text):
    env = lake(invalid_penalty=0.25)
    env.step("Right")
    before = (env.render(), env.state_key())
    r = env.step(text)
    assert r.reward == pytest.approx(-0.25)
    assert r.info["valid_action"] is False and r.info["success"] is False and not r.done
    lines = r.observation.splitlines()
    assert lines[0] == "Invalid action. Answer with one of: Left, Down, Right, Up."
    assert "\n".join(lines[1:]) == before[0]
    assert (env.render(), env.state_key()) == before


def test_frozenlake_non_string_action_is_invalid():
    env = lake()
    for bad in (None, 3, b"Left"):
        assert env.step(bad).info["valid_action"] is False  # type: ignore[arg-type]
    assert env.state_key() == "0,0"


def test_frozenlake_multi_move_turns():
    env = lake(moves_per_turn=3)
    assert "1 to 3 moves" in env.instructions
    r = env.step("Right, Down down")
    assert r.info["moves"] == ["Right", "Down", "Down"] and env.state_key() == "2,1" and r.reward == 0.0
    r = env.step("Right Down Right")  # reaches the goal
    assert r.reward == 1.0 and r.done and r.info["success"]
    # too many moves is invalid and changes nothing
    env = lake(moves_per_turn=3)
    r = env.step("Right Down Down Right")
    assert r.info["valid_action"] is False and r.reward == pytest.approx(-0.1) and env.state_key() == "0,0"
    assert r.observation.startswith("Invalid action. Answer with 1 to 3 moves")
    # the turn stops early when the episode ends
    r = env.step("Down Right Right")
    assert r.done and r.info["moves"] == ["Down"] and env.state_key() == "1,0,done"


def test_frozenlake_seeds():
    env = FrozenLakeEnv(**CLASSIC)
    a = env.reset(7)
    assert a == FrozenLakeEnv(**CLASSIC).reset(7) and env.state_key() == "0,0"
    maps = {FrozenLakeEnv(**CLASSIC).reset(s) for s in range(20)}
    assert len(maps) >= 10
    for m in maps:
        rows = m.splitlines()
        assert len(rows) == 4 and all(len(r.split(" ")) == 4 for r in rows)
        assert "\x1b" not in m and set(m) <= set("P_OG \n")
    big = FrozenLakeEnv(**CLASSIC, size=6).reset(3)
    assert len(big.splitlines()) == 6
    assert FrozenLakeEnv().reset(-5)  # negative seeds are fine


def _trace(env, actions):
    return [(tuple(env.step(a))[:3], env.state_key()) for a in actions]


def test_frozenlake_snapshot_restore_exact_slippery():
    actions = ["Right", "Down", "Right", "Down", "Left", "Down", "Right", "Up"] * 3
    env = FrozenLakeEnv(**{**CLASSIC, "max_turns": 30}, slippery=True, size=6, p_frozen=0.95)
    env.reset(11)
    env.step("Right")
    snap = env.snapshot()
    original = _trace(env, actions)
    env.restore(snap)
    assert _trace(env, actions) == original
    fresh = FrozenLakeEnv(**CLASSIC, slippery=True, size=6, p_frozen=0.95)
    fresh.restore(snap)
    assert _trace(fresh, actions) == original
    # same seed, same slippery episode
    a, b = FrozenLakeEnv(**CLASSIC, slippery=True), FrozenLakeEnv(**CLASSIC, slippery=True)
    a.reset(3), b.reset(3)
    assert _trace(a, actions) == _trace(b, actions)
    # slippery ice does slide: across seeds, "Right" does not always go right
    moved = set()
    for seed in range(10):
        e = FrozenLakeEnv(**CLASSIC, slippery=True, p_frozen=1.0, split="train+test")  # one map: no held-out set
        e.reset(seed)
        e.step("Right")
        moved.add(e.state_key())
    assert len(moved) > 1


def test_frozenlake_examples_and_instructions():
    assert "Left, Down, Right or Up" in FrozenLakeEnv.instructions
    train_maps = {FrozenLakeEnv(**CLASSIC).reset(s).replace("P", "_") for s in range(50)}
    for examples, k in [(FrozenLakeEnv(**CLASSIC).examples, 1), (FrozenLakeEnv(moves_per_turn=2).examples, 2)]:
        assert len(examples) == 2
        for obs, action in examples:
            assert parse_moves(action, FrozenLakeEnv.moves, k) is not None
            assert obs.replace("P", "_") not in train_maps
    assert FrozenLakeEnv.examples[0][1] == "Right"  # a hole is below the start


# ---------------------------------------------------------------------------------------------- Sokoban
ROOM_ONE = """\
# # # # # # #
# _ _ _ _ _ #
# P X _ O _ #
# _ _ _ # _ #
# # # # # # #"""

ROOM_TWO = """\
# # # # # # #
# _ _ _ _ _ #
# P X O _ _ #
# _ _ _ # _ #
# _ X _ O _ #
# # # # # # #"""

ROOM_JAM = """\
# # # # # #
# P X X O #
# _ _ _ O #
# # # # # #"""


def room(text, **options) -> SokobanEnv:
    env = SokobanEnv(**options)
    env.load(text)
    return env


def test_sokoban_moves_and_walls():
    env = room(ROOM_ONE)
    assert env.render() == ROOM_ONE
    assert env.state_key() == "P2,1|B2,2"
    r = env.step("Left")  # a wall: valid, costs the step, nothing moves
    assert r.info["valid_action"] and r.reward == pytest.approx(-0.1) and env.state_key() == "P2,1|B2,2"
    r = env.step("up")
    assert r.reward == pytest.approx(-0.1) and env.state_key() == "P1,1|B2,2"
    assert r.observation.splitlines()[1] == "# P _ _ _ _ #"


def test_sokoban_push_and_solve():
    env = room(ROOM_ONE)
    r = env.step("Right")  # push the box one cell
    assert r.reward == pytest.approx(-0.1) and env.state_key() == "P2,2|B2,3" and not r.done
    r = env.step("Right")  # onto the only target: -0.1 + 1 + 10
    assert r.reward == pytest.approx(10.9) and r.done and r.info["success"]
    assert r.observation.splitlines()[2] == "# _ _ P √ _ #"
    assert env.progress() == 1.0
    after = env.step("Right")
    assert after.done and after.reward == 0.0 and env.state_key() == "P2,3|B2,4"


def test_sokoban_on_and_off_target():
    env = room(ROOM_TWO)
    assert 0.0 <= env.progress() < 0.5
    r = env.step("Right")  # box onto a target, not solved (two boxes)
    assert r.reward == pytest.approx(0.9) and not r.done and not r.info["success"]
    assert r.observation.splitlines()[2] == "# _ P √ _ _ #"
    assert env.progress() > 0.5
    r = env.step("Right")  # box off the target; the player now stands on it
    assert r.reward == pytest.approx(-1.1)
    assert r.observation.splitlines()[2] == "# _ _ S X _ #"


def test_sokoban_blocked_pushes():
    env = room(ROOM_JAM)
    r = env.step("Right")  # box against a box
    assert r.info["valid_action"] and r.reward == pytest.approx(-0.1) and env.state_key() == "P1,1|B1,2;1,3"
    env = room(ROOM_TWO)
    env.step("Down")
    env.step("Right")
    assert env.state_key() == "P3,2|B2,2;4,2"
    r = env.step("Down")  # box against the wall
    assert r.reward == pytest.approx(-0.1) and env.state_key() == "P3,2|B2,2;4,2"


@pytest.mark.parametrize("text", INVALID_TEXTS)
def test_sokoban_invalid_actions(text):
    env = room(ROOM_ONE)
    before = env.state_key()
    r = env.step(text)
    assert r.info["valid_action"] is False and r.reward == pytest.approx(-0.1) and not r.done
    assert r.observation == "Invalid action. Answer with one of: Up, Down, Left, Right.\n" + ROOM_ONE
    assert env.state_key() == before


def test_sokoban_multi_move():
    env = room(ROOM_ONE, moves_per_turn=3)
    r = env.step("Right, Right, Right")  # stops when solved after two moves
    assert r.info["moves"] == ["Right", "Right"] and r.reward == pytest.approx(10.8) and r.done
    env = room(ROOM_ONE, moves_per_turn=2)
    r = env.step("Up Up Up")
    assert r.info["valid_action"] is False and env.state_key() == "P2,1|B2,2"


def test_solve_hand_rooms():
    assert solve(ROOM_ONE) == ["Right", "Right"]
    plan = solve(ROOM_TWO)
    # shortest: push the top box right (1), walk to the left of the bottom box (3), push it right twice (2)
    assert plan is not None and len(plan) == 6 and plan[0] == "Right" and plan[-2:] == ["Right", "Right"]
    env = room(ROOM_TWO)
    rewards = [env.step(m).reward for m in plan]
    assert env.done and sum(rewards) == pytest.approx(-0.1 * 6 + 1 + 1 + 10)
    assert solve(ROOM_JAM) is None  # both boxes are stuck against the top wall
    assert solve(ROOM_ONE, max_depth=1) is None


@pytest.mark.parametrize("dim,boxes,seeds", [((6, 6), 1, range(30)), ((7, 7), 2, range(10))])
def test_generated_rooms_are_solvable(dim, boxes, seeds):
    for seed in seeds:
        env = SokobanEnv(dim_room=dim, num_boxes=boxes)
        obs = env.reset(seed)
        grid = parse_room(obs)
        assert grid["shape"] == dim and len(grid["boxes"]) == boxes
        assert not env.done and env.progress() < 1.0
        plan = solve(env, max_depth=env.search_depth)
        assert plan, f"seed {seed} is not solvable:\n{obs}"
        r = None
        for move in plan:
            r = env.step(move)
        assert r.done and r.info["success"], seed


def test_sokoban_determinism_and_snapshot():
    a, b = SokobanEnv(), SokobanEnv()
    assert a.reset(5) == b.reset(5) and a.state_key() == b.state_key()
    assert len({SokobanEnv().reset(s) for s in range(20)}) >= 15
    a.reset(9)
    snap = a.snapshot()
    moves = ["Up", "Left", "Down", "Right", "Right", "Up", "Left", "Down"]
    first = _trace(a, moves)
    a.restore(snap)
    assert _trace(a, moves) == first
    fresh = SokobanEnv()
    fresh.restore(snap)
    assert _trace(fresh, moves) == first


def test_sokoban_examples():
    for env in (SokobanEnv(), SokobanEnv(moves_per_turn=2)):
        assert len(env.examples) == 2
        for obs, action in env.examples:
            plan = solve(obs)
            moves = parse_moves(action, SokobanEnv.moves, env.moves_per_turn)
            assert moves == plan[: len(moves)]
    assert "Up, Down, Left or Right" in SokobanEnv.instructions


def test_sokoban_positions_in_words():
    # ROOM_TWO: you at (2, 1); boxes at (2, 2) and (4, 2); targets at (2, 3) and (4, 4)
    assert offset((2, 1), (4, 2)) == "2 Down, 1 Right" and offset((2, 2), (2, 2)) == "here"
    assert describe_positions((2, 1), {(2, 2), (4, 2)}, {(2, 3), (4, 4)}) == (
        "Box 1: 1 Right of you; its target 1 Right of it.\n"
        "Box 2: 2 Down, 1 Right of you; its target 2 Right of it.")
    # a box on a target is said so; the other box counts only the target no box covers
    assert describe_positions((2, 1), {(2, 3), (4, 2)}, {(2, 3), (4, 4)}).splitlines() == [
        "Box 1: 2 Right of you; on its target.", "Box 2: 2 Down, 1 Right of you; its target 2 Right of it."]
    assert describe_positions((3, 3), {(1, 1)}, {(1, 4)}, aim="you") == "The cell T: 2 Up, 1 Right of you."
    assert describe_positions((1, 4), {(1, 1)}, {(1, 4)}, aim="you") == "The cell T: you stand on it."

    env = room(ROOM_ONE, positions=True)
    assert env.render() == ROOM_ONE + "\nThe box: 1 Right of you; its target 2 Right of it."
    r = env.step("Right")  # the words follow the state
    assert r.observation.splitlines()[-1] == "The box: 1 Right of you; its target 1 Right of it."
    assert "counted in moves from you" in env.instructions and "counted" not in SokobanEnv().instructions
    for obs, action in env.examples:  # the examples show the words too, under the same plan
        grid, words = obs.rsplit("\n", 1)
        assert words.startswith("The box: ") and solve(grid)[0] == action
    assert room(ROOM_ONE).render() == ROOM_ONE  # off by default
    with pytest.raises(ConfigError, match="'positions' must be true or false"):
        SokobanEnv(positions="yes")


# ---------------------------------------------------------------------------------------------- registry
def test_make_env():
    assert set(ENVS) == {"frozenlake", "sokoban", "shop", "tables"}
    env = make_env("frozenlake", size=5, slippery=True)
    assert isinstance(env, FrozenLakeEnv) and env.size == 5 and env.slippery
    env = make_env("sokoban", dim_room=[7, 7], num_boxes=2)
    assert env.dim_room == (7, 7) and len(parse_room(env.reset(0))["boxes"]) == 2
    assert env_options(FrozenLakeEnv) == {
        "size": 4, "slippery": False, "p_frozen": 0.8, "max_turns": 8, "moves_per_turn": 1, "invalid_penalty": 0.1,
        "progress_reward": 1.0, "bump_penalty": 0.1, "hints": True, "split": "train", "tasks_file": "",
    }
    assert set(env_options(SokobanEnv)) == {
        "dim_room", "num_boxes", "max_turns", "moves_per_turn", "invalid_penalty", "search_depth", "split",
        "tasks_file", "positions",
    }


def test_make_env_errors():
    with pytest.raises(ConfigError, match=r"unknown env 'lake'; allowed: frozenlake, shop, sokoban, tables"):
        make_env("lake")
    with pytest.raises(ConfigError) as e:
        make_env("frozenlake", sizee=4)
    assert "'sizee'" in str(e.value)
    for name in env_options(FrozenLakeEnv):
        assert name in str(e.value)
    with pytest.raises(ConfigError, match="'size'"):
        make_env("frozenlake", size="4")
    with pytest.raises(ConfigError, match="'size'"):
        make_env("frozenlake", size=1)
    with pytest.raises(ConfigError, match="'num_boxes'"):
        make_env("sokoban", num_boxes=1.5)
    with pytest.raises(ConfigError, match="'dim_room'"):
        make_env("sokoban", dim_room=6)
    with pytest.raises(ConfigError):
        make_env(dict)  # type: ignore[arg-type]


class Counter(TextEnv):
    """A user-defined env: say 'up' three times."""

    name = "counter"
    instructions = "Say up."

    def __init__(self, target: int = 3):
        self.target = target
        self.n = 0

    def reset(self, seed: int) -> str:
        self.n = 0
        return "0"

    def step(self, action: str) -> StepResult:
        ok = action.strip().lower() == "up"
        self.n += ok
        done = self.n >= self.target
        return StepResult(str(self.n), float(done), done, {"success": done, "valid_action": ok})


def test_make_env_with_a_class():
    env = make_env(Counter, target=2)
    env.reset(0)
    env.step("up")
    assert env.step("up").info["success"]
    snap = env.snapshot()
    env.reset(0)
    env.restore(snap)
    assert env.n == 2
    with pytest.raises(ConfigError, match="'goal'.*target"):
        make_env(Counter, goal=2)


def test_frozenlake_progress_shaping_sums_to_final_potential():
    """Shaping per move = coef * (phi(s') - phi(s)), phi = 1 - manhattan/6 on 4x4 and 0 in a hole.

    On the example map (hole at (1,0)): Right -> (0,1): phi 0 -> 1/6, reward 1/6. Then Left, Down -> (1,0) is a
    hole: phi 1/6 -> 0 in that turn: reward -1/6, and the episode's shaping sums to 0 (= phi of a hole).
    Reaching the goal gives 1 + coef * (1 - phi(s)).
    """
    env = FrozenLakeEnv(progress_reward=1.0, moves_per_turn=4, bump_penalty=0.0, hints=False)
    env.load(["SFFF", "HFHF", "FFFH", "HFFG"])
    _, r1, done, _ = env.step("Right")
    assert r1 == pytest.approx(1 / 6) and not done
    _, r2, done, info = env.step("Left Down")
    assert r2 == pytest.approx(-1 / 6) and done and not info["success"]
    env.load(["SFFF", "HFHF", "FFFH", "HFFG"])
    _, r, done, info = env.step("Right Down Down Right")  # to (2,2): phi = 1 - 2/6
    assert r == pytest.approx(4 / 6)
    _, r, done, info = env.step("Down Right")
    assert done and info["success"] and r == pytest.approx(1 + 2 / 6)


def test_frozenlake_bump_penalty_for_moves_into_the_edge():
    env = FrozenLakeEnv(progress_reward=0.0, bump_penalty=0.1, moves_per_turn=2)
    env.load(["SFFF", "HFHF", "FFFH", "HFFG"])
    _, r, _, _ = env.step("Up Left")  # two wasted moves at the start corner
    assert r == pytest.approx(-0.2) and env.state_key() == "0,0"
    _, r, _, _ = env.step("Right")
    assert r == 0.0 and env.state_key() == "0,1"


def test_frozenlake_hints_spell_out_the_neighbourhood():
    env = FrozenLakeEnv(hints=True)
    obs = env.load(LAKE)
    assert obs.splitlines()[-1] == "Left: edge. Down: hole. Right: ice. Up: edge."
    env.step("Right")
    env.step("Down")
    env.step("Down")
    env.step("Right")  # (2,2): hole to the right, goal diagonal
    assert env.render().splitlines()[-1] == "Left: ice. Down: ice. Right: hole. Up: hole."
    env.step("Down")
    assert env.render().splitlines()[-1] == "Left: ice. Down: edge. Right: goal. Up: ice."
    env.step("Right")
    assert env.done and "Left:" not in env.render()  # no hints once the episode is over
