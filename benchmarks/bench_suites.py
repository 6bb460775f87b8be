"""Learning on environments nobody here wrote (issue 42 item 3): the default recipe (``selfevolve train`` with its
defaults: the expert warm start where the game has an expert, then 20 GRPO updates) against the untrained model and
the random valid policy, on each game's held-out tasks, over several seeds.

Each game is one ``selfevolve sweep`` (``OUT/GAME/seed-N``, resumable: a finished seed is skipped, an interrupted
one continues), so the untrained model's success is the run's own evaluation before training and the trained
one's after, on the same held-out tasks (the test split from ``eval.seed_offset``). The random valid policy plays
those same tasks once per seed (a seeded uniform draw from ``valid_actions()`` each turn).

    python benchmarks/bench_suites.py --games rg-maze twx-coin ta-frozenlake --seeds 0 1 2 --workers 3
    python benchmarks/bench_suites.py --games rg-maze --seeds 0 --extra eval.episodes=16   # a quick look

Writes ``OUT/summary.json`` and prints a markdown table (per game: tasks, random, untrained and trained success
per seed, mean ± std, seeds learned, the trained policy's distinct first replies, and the random and trained wins
in at most ``--within`` turns), for GuessTheNumber a note on how many guesses follow the hints (random,
untrained, trained), and a final SUMMARY line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SMALL_COIN = ["env.config.numLocations=3", "env.config.includeDoors=0", "env.config.numDistractorItems=0"]
GAMES = {  # the bench suites' settings (selfevolve/bench/suites.py): what a 135M model can play at all
    "rg-maze": ["env.name=rg:maze", "env.retries=2"],
    "twx-coin": ["env.name=twx:coin", *SMALL_COIN],
    "ta-frozenlake": ["env.name=textarena:FrozenLake-v0"],
    # 1..100: 17 held-out numbers (the registered 1..20 holds out 3); binary search wins within 7 guesses
    "ta-guess": ["env.name=textarena:GuessTheNumber-v0", "env.config.max_number=100"],
    # one instance from every seed: nothing is held out (docs/environments.md), so it is not in the default list
    "ta-hanoi": ["env.name=textarena:TowerOfHanoi-v0", "env.split=all", "eval.env.split=all"],
}


def sweep(game: str, args) -> dict:
    out = args.out / game
    cmd = [sys.executable, "-m", "selfevolve.cli", "sweep", *GAMES[game], f"seeds={','.join(map(str, args.seeds))}",
           f"sweep.out_dir={out}", "train.progress=false", *args.extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    if args.small_heap:  # glibc's own settings, not the run's (selfevolve/models/allocator.py)
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    out.mkdir(parents=True, exist_ok=True)
    with (out / "bench.log").open("a") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    if code != 0 or not (out / "summary.json").is_file():
        return {"game": game, "error": f"exit {code}, see {out / 'bench.log'}"}
    return {"game": game, **json.loads((out / "summary.json").read_text())}


def random_baseline(game: str, seeds: list[int], extra: list[str]) -> dict:
    """The random valid policy on the game's held-out tasks, once per seed (wins, the turns of each win, tasks)."""
    from rich.console import Console

    from selfevolve.bench import Bench, held_out_tasks, resolve
    from selfevolve.bench.suites import Game
    from selfevolve.config import load_config

    cfg = load_config(None, [*GAMES[game], *extra])
    resolved = resolve(Game(cfg.env.name, cfg.env.options(), cfg.eval.env))  # what the runs' evaluation plays
    if isinstance(resolved, str):
        return {"error": resolved}
    env_cls, opts = resolved
    tasks = held_out_tasks(env_cls, opts, cfg.eval.episodes, cfg.eval.seed_offset)
    wins, win_turns = [], []
    for seed in seeds:  # selfevolve bench's own random column, seeded as a run of that seed would seed it
        rate = Bench(cfg.model_copy(update={"seed": seed}), None, Console(stderr=True))._random(env_cls, opts, tasks)
        wins.append(None if rate["success"] is None else round(rate["success"] * len(tasks)))
        win_turns.append(rate.get("win_turns"))
    out = {"tasks": len(tasks), "wins": wins, "win_turns": win_turns}
    if cfg.env.name.startswith("rg:"):
        out["blind"] = blind_answers(env_cls, opts, tasks)
    if getattr(env_cls, "game_type", None) == "GuessTheNumberEnv":  # a TextArena game (rg, twx: no game_type)
        low, high = guess_bounds(cfg)
        out["bounds"] = [low, high]
        out["hint_reading"] = [hint_reading(random_guess_games(env_cls, opts, tasks, seed), low, high)
                               for seed in seeds]
    return out


def guess_bounds(cfg) -> tuple[int, int]:
    """GuessTheNumber's range under the run's settings (env.config over the registered ones)."""
    from selfevolve.envs import env_class

    game = {**env_class(cfg.env.name).defaults, **(cfg.env.options().get("config") or {})}
    return int(game["min_number"]), int(game["max_number"])


def blind_answers(env_cls, options: dict, tasks, draws: int = 500) -> dict | None:
    """A policy that never reads the question: the most common reference answers of ``draws`` training
    questions, most common first, one per try. A reasoning-gym answer space can be narrow (maze distances):
    this is what learning the answers' distribution alone reaches."""
    from collections import Counter

    from selfevolve.bench.players import play_text
    from selfevolve.envs import make_env

    probe = make_env(env_cls, **{**options, "split": "train"})
    try:
        counts, tries = Counter(), probe.max_turns
        for seed in range(draws):
            probe.reset(seed)
            answer = probe.expert_action()
            if answer is not None:  # datasets that accept many answers have no expert (docs/environments.md)
                counts[answer] += 1
    finally:
        probe.close()
    if not counts:
        return None
    order = [a for a, _ in counts.most_common(tries)]
    won = play_text(env_cls, options, tasks, lambda envs, obs, acts, ts: [order[min(len(a), len(order) - 1)]
                                                                          for a in acts])
    return {"answers": order, "counts": counts.most_common(tries), "of": draws, "wins": sum(won)}


def hint_reading(games: list[list[tuple[str, str]]], low: int, high: int) -> float | None:
    """GuessTheNumber: the share of guesses, after each game's first, that lie in the range the game's earlier
    hints leave ("higher", "lower"). Binary search scores 1; a guesser that ignores the hints scores about the
    share of the numbers still allowed. ``games``: each game's (reply, observation) pairs."""
    from selfevolve.envs.suites.textarena_experts import guess_range

    inside = total = 0
    for game in games:
        history: list[tuple[int, str]] = []
        for reply, observation in game:
            m = re.search(r"\[(\d+)\]", reply)  # the game's own reading of a reply: the first [number]
            if m is None:
                continue
            guess = int(m.group(1))
            if history:
                lo, hi = guess_range(low, high, history)
                inside, total = inside + (lo <= guess <= hi), total + 1
            hint = re.search(r"target number is (higher|lower)", observation)
            if hint:
                history.append((guess, hint.group(1)))
    return inside / total if total else None


def evaluation_games(episodes: list[dict] | None) -> list[list[tuple[str, str]]]:
    return [[(st["action_text"], st["observation"]) for st in r["steps"]] for r in episodes or []]


def random_guess_games(env_cls, options: dict, tasks, seed: int) -> list[list[tuple[str, str]]]:
    """The random valid policy's games (uniform over the numbers not guessed yet), seeded as its wins are."""
    from selfevolve.bench.players import play_text, random_chooser

    games: list[list[tuple[str, str]]] = []
    play_text(env_cls, options, tasks, random_chooser(seed)[0], games=games)
    return games


def evaluations(run: Path) -> list[dict]:
    """Every episode of the run's evaluations, in order (none before its first)."""
    try:
        return [json.loads(line) for line in (run / "eval_trajectories.jsonl").read_text().splitlines()
                if line.strip()]
    except (OSError, ValueError):  # no evaluation yet, or a line cut by a crash
        return []


def last_evaluation(run: Path) -> list[dict] | None:
    """The episodes of the run's last evaluation, or None before its first."""
    rows = evaluations(run)
    if not rows:
        return None
    key = lambda r: (r["step"], (r.get("eval") or {}).get("label"))  # noqa: E731 - step 0: start, after warm start
    return [r for r in rows if key(r) == key(rows[-1])]


def first_evaluation(run: Path) -> list[dict] | None:
    """The episodes of the run's first evaluation (step 0, the untrained model), or None."""
    first = [r for r in evaluations(run) if r["step"] == 0 and (r.get("eval") or {}).get("label") in (None, "start")]
    return first or None


def first_replies(episodes: list[dict] | None) -> int | None:
    """Distinct first replies of an evaluation: 1 means the trained policy ignores the task."""
    return None if episodes is None else len({r["steps"][0]["action_text"] for r in episodes if r["steps"]})


def quick(win_turns: list[int] | None, within: int) -> int | None:
    """Wins in at most ``within`` turns: on a game whose turn budget lets a random walk win often (coin's 15 turns
    over 3 rooms), how soon a policy wins is what tells reading the game from wandering."""
    return None if win_turns is None else sum(t <= within for t in win_turns)


def trained_win_turns(episodes: list[dict] | None) -> list[int] | None:
    """The turns of each won episode of an evaluation."""
    return None if episodes is None else [len(r["steps"]) for r in episodes if r.get("success")]


def _pct(xs) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    return f"{100 * statistics.mean(xs):.1f} % ± {100 * (statistics.stdev(xs) if len(xs) > 1 else 0.0):.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", nargs="+", default=["rg-maze", "twx-coin", "ta-frozenlake"], choices=list(GAMES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=1, help="games trained at a time (a sweep runs its seeds in turn)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--small-heap", action="store_true",
                    help="hand freed memory back to the system (glibc's 64 KiB mmap threshold): a smaller peak "
                    "per run for many runs at once, at about 1.4x the wall time (docs/benchmarks.md)")
    ap.add_argument("--extra", nargs="*", default=[], help="more overrides for every run (key=value)")
    ap.add_argument("--within", type=int, default=3, help="also count the wins in at most this many turns")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_suites"))
    args = ap.parse_args()
    with ThreadPoolExecutor(args.workers) as pool:
        sweeps = list(pool.map(lambda g: sweep(g, args), args.games))
    print("| game | held-out tasks | random valid, per seed | most common answers (blind) | untrained, per seed | "
          "default recipe, per seed | default recipe, mean ± std | seeds learned | distinct first replies, trained | "
          f"won within {args.within} turns: random; trained |")
    print("|---|---:|---|---|---|---|---:|---:|---|---|")
    summary, line, notes = {}, [], []
    for game, s in zip(args.games, sweeps):
        try:
            rand = random_baseline(game, args.seeds, args.extra)
        except Exception as e:  # noqa: BLE001 - the table of the other games is still worth printing
            rand = {"error": f"{type(e).__name__}: {e}"}
        summary[game] = {"sweep": s, "random": rand}
        if "error" in s:
            print(f"| {game} | | | | | ({s['error']}) | | | | |")
            continue
        per = s["per_seed"]
        n = rand.get("tasks") or per[0].get("eval_tasks") or 0
        before = [p.get("before") for p in per]
        after = [p.get("after") for p in per]
        rw = rand.get("wins") or []
        # successes back to counts, each seed over its own evaluation's tasks
        fmt = lambda xs: ", ".join("—" if x is None else f"{round(x * (p.get('eval_tasks') or n))}"  # noqa: E731
                                   for x, p in zip(xs, per))
        blind = rand.get("blind")
        evals = [last_evaluation(args.out / game / f"seed-{p['seed']}") for p in per]
        distinct = [first_replies(e) for e in evals]
        cells = lambda xs: ", ".join("—" if x is None else str(x) for x in xs)  # noqa: E731
        quick_cell = (f"{cells(quick(t, args.within) for t in rand.get('win_turns') or [])}; "
                      f"{cells(quick(trained_win_turns(e), args.within) for e in evals)}")
        blind_cell = f"{blind['wins']} ({', '.join(blind['answers'])})" if blind else "—"
        random_cell = cells(rw) or f"({rand.get('error', '')[:100]})"
        print(f"| {game} | {n} | {random_cell} | {blind_cell} | {fmt(before)} | {fmt(after)} | {_pct(after)} | "
              f"{s['learned']} of {len(per)} | {cells(distinct)} | {quick_cell} |")
        if "hint_reading" in rand:  # GuessTheNumber: does the policy read the hints?
            low, high = rand["bounds"]
            first = [first_evaluation(args.out / game / f"seed-{p['seed']}") for p in per]
            reading = {"random": rand["hint_reading"],
                       "untrained": [hint_reading(evaluation_games(e), low, high) for e in first],
                       "trained": [hint_reading(evaluation_games(e), low, high) for e in evals]}
            summary[game]["hint_reading"] = reading
            share = lambda xs: ", ".join("—" if x is None else f"{100 * x:.0f} %" for x in xs)  # noqa: E731
            notes.append(f"{game}: guesses inside the range the hints leave (after each game's first): random "
                         f"{share(reading['random'])}; untrained {share(reading['untrained'])}; trained "
                         f"{share(reading['trained'])} (binary search: 100 %)")
        line.append(f"{game} random {_pct([w / n for w in rw if w is not None and n])}, untrained {_pct(before)}, "
                    f"trained {_pct(after)}, {s['learned']}/{len(per)} learned")
    for note in notes:
        print(f"\n{note}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("SUMMARY suites (held-out greedy success, mean ± std over seeds): " + "; ".join(line))


if __name__ == "__main__":
    main()
