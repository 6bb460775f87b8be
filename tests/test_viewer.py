"""The trajectory viewer (``selfevolve view``) on a real tiny run, opened in headless Chromium.

One run is trained for the module (``model.name=tiny``, Self-AC with beam search, so that it has values,
advantages and search trees; a short warm start and three evaluations, so that it has a loss curve and evaluation
episodes) and its page written by the real command. Each test opens a view of the page by its
URL (the location hash selects the view) with ``chromium --dump-dom``, which prints the DOM after the page's
scripts ran, and checks what was rendered against the run's own files: counts of steps, groups, turns, coloured
tokens, tree nodes, filtered rows, and the chat JSONL export read back. No Python browser driver is needed.

Chromium comes from Debian's package (``make setup`` installs it when missing). Without it the tests fail on CI
(``CI`` set) and are skipped elsewhere, with the command that installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from selfevolve import Trainer, load_config
from selfevolve.cli import app
from selfevolve.models.loading import load_model
from selfevolve.view.load import load_run
from selfevolve.view.record import token_pieces
from selfevolve.view.serve import make_server

RUN = [
    "model.name=tiny", "model.dtype=fp32", "env.size=3", "env.max_turns=4", "train.steps=2",
    "train.warm_start_steps=0", "train.tasks_per_step=2", "algo.group_size=2", "algo.name=self_ac",
    "rollout.search=beam", "search.m=2", "search.beams=2", "eval.episodes=2", "train.progress=false",
    "train.warm_start_steps=2", "train.warm_start_tasks=2", "eval.after_warm_start=true",
]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        msg = "headless Chromium is needed: `make setup` installs it (apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return exe


def browse(url: str, tmp: Path, screenshot: Path | None = None, size: str = "1280,900") -> "Dom":
    """The DOM of ``url`` after its scripts ran (and a screenshot of it when asked)."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    args = [chromium(), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000"]
    if screenshot is not None:
        subprocess.run([*args, f"--screenshot={screenshot}", f"--window-size={size}", url], capture_output=True,
                       timeout=120, check=True)
    out = subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    dom = Dom(out)
    assert dom.root_attrs.get("data-ready"), f"the page did not finish rendering {url}:\n{out[-2000:]}"
    return dom


class Dom(HTMLParser):
    """Elements of a serialised DOM: tag, attributes and text (enough to count and read what was rendered)."""

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[dict] = []
        self.stack: list[dict] = []
        self.root_attrs: dict = {}
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        el = {"tag": tag, "attrs": dict(attrs), "text": []}
        if tag == "html":
            self.root_attrs = el["attrs"]
        self.elements.append(el)
        if tag not in VOID:
            self.stack.append(el)

    def handle_endtag(self, tag):
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k]["tag"] == tag:
                del self.stack[k:]
                break

    def handle_data(self, data):
        for el in self.stack[-3:]:  # enough for the texts read here, without copying scripts into <html>
            el["text"].append(data)

    def all(self, tag: str | None = None, cls: str | None = None, **attrs) -> list[dict]:
        return [e for e in self.elements if (tag is None or e["tag"] == tag)
                and (cls is None or cls in e["attrs"].get("class", "").split())
                and all(e["attrs"].get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def one(self, tag: str | None = None, cls: str | None = None, **attrs) -> dict:
        found = self.all(tag, cls, **attrs)
        assert len(found) == 1, (tag, cls, attrs, len(found))
        return found[0]


def text(el: dict) -> str:
    return "".join(el["text"])


def dump(url: str, tmp: Path) -> str:
    """The rendered part of the DOM of ``url`` after its scripts ran, serialised (for what the element list does
    not keep: SVG text in order, table rows); the page's own scripts and data blocks left out."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    out = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=5000",
                          "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    assert re.search(r"<html[^>]*data-ready=", out), f"the page did not finish rendering {url}"
    return out.split('<div id="app">', 1)[1].split("<script", 1)[0]


def js_fmt(x: float, digits: int = 4) -> str:
    """The page's ``fmt(x, 4)`` for the values checked here (0 and numbers between 1e-4 and 1e4)."""
    if abs(x) < 1e-12:
        return "0"
    r = round(x, digits)
    return str(int(r)) if r == int(r) else str(r)


def phase_rows(markup: str) -> list[list[str]]:
    """The cells' texts of the time-per-phase table."""
    rows = re.findall(r'<tr class="phase-row">(.*?)</tr>', markup)
    return [[re.sub(r"<[^>]*>", "", c).strip() for c in re.findall(r"<td>(.*?)</td>", row)] for row in rows]


def records(run: Path, name: str = "trajectories.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A real tiny run with its page written by ``selfevolve view``."""
    out = tmp_path_factory.mktemp("viewer") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        Trainer(load_config(overrides=[*RUN, f"train.out_dir={out}"])).train()
    finally:
        torch.set_num_threads(threads)
    result = CliRunner().invoke(app, ["view", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "8 trajectories, 2 steps, 3 evaluations of 6 episodes" in result.output
    return out


def request(run: Path, rec: dict) -> str:
    """The episode's first observation: recorded by plain rollouts, the root of its tree for beam search."""
    if "query" in rec["flags"]:
        return rec["flags"]["query"]
    tree = [t for t in records(run, "search_trees.jsonl") if t["step"] == rec["step"]][rec["flags"]["search"]["tree"]]
    return next(n["observation"] for n in tree["nodes"] if n["parent"] is None)


def page(run: Path, view: str = "") -> str:
    return (run / "view.html").as_uri() + ("#/" + view if view else "")


# ---- what the run records -------------------------------------------------------------------------------------

def test_the_run_records_what_the_viewer_needs(run):
    recs = records(run)
    assert len(recs) == 8 and {r["step"] for r in recs} == {1, 2}
    _, tok = load_model("tiny", "fp32", seed=0)
    special = set(tok.all_special_tokens)
    for r in recs:
        assert r["system"].startswith("FrozenLake") and len(r["flags"]["advantages"]) == len(r["steps"])
        assert len(r["flags"]["values"]) == len(r["steps"]) + 1  # V(s_0..s_n), the final state too (Self-AC)
        for k, s in enumerate(r["steps"]):
            t = s["tokens"]
            assert len(t["text"]) == len(t["logprob"]) == len(t["entropy"]) > 0
            assert all(lp <= 0 for lp in t["logprob"]) and all(e >= 0 for e in t["entropy"])
            joined = "".join(p for p in t["text"] if p not in special)
            assert joined == s["action_text"]  # the pieces are the reply, token by token
            assert 0 <= s["uncertainty"] <= 1
            assert s["prompt"]["extends"] == (k > 0)  # the full-history chat: later prompts are tails
        full = "".join(s["prompt"]["text"] for s in r["steps"])
        assert full.count("<|im_start|>assistant") >= len(r["steps"])


def test_token_pieces_join_to_the_decoded_text_across_split_characters():
    _, tok = load_model("tiny", "fp32", seed=0)
    for sample in ["héllo 🙂 wörld — ok", "日本語のテキスト", " Right<|im_end|>"]:
        ids = tok.encode(sample, add_special_tokens=False)
        pieces = token_pieces(tok, ids)
        assert len(pieces) == len(ids) and "".join(pieces) == tok.decode(ids, skip_special_tokens=False)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):  # random ids: orphan continuation bytes and all
        ids = torch.randint(len(tok), (12,), generator=g).tolist()
        assert "".join(token_pieces(tok, ids)) == tok.decode(ids, skip_special_tokens=False)


# ---- the page in the browser ----------------------------------------------------------------------------------

def test_the_page_is_self_contained(run):
    markup = (run / "view.html").read_text()
    assert "Content-Security-Policy" in markup and "default-src 'none'" in markup
    assert " src=" not in markup and "<link" not in markup  # nothing is loaded from anywhere
    script = markup.split("<script>")[-1].replace("'http://www.w3.org/2000/svg'", "")  # a name, not a location
    assert "http://" not in script and "https://" not in script and "//cdn" not in script


def test_summary_shows_curves_evaluations_and_every_step(run, tmp_path):
    shot = tmp_path / "summary.png"
    dom = browse(page(run), tmp_path, screenshot=shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    assert [e["attrs"]["data-step"] for e in dom.all("tr", "step-row")] == ["1", "2"]
    charts = {e["attrs"]["data-metric"] for e in dom.all("svg", "chart")}
    assert {"reward/mean", "success/rate", "eval/success"} <= charts
    assert dom.one("table", "evals")
    assert int(dom.root_attrs["data-ready-ms"]) < 2000  # opens and is usable within 2 s


def chart_parts(markup: str, metric: str) -> tuple[list[str], list[str], list[str], list[tuple[float, float]]]:
    """The y tick labels, x tick labels, dot titles and line points of one chart of a dumped page."""
    svg_text = markup.split(f'data-metric="{metric}"', 1)[1].split("</svg>", 1)[0]
    ticks = lambda cls: re.findall(rf'class="tick {cls}"[^>]*>([^<]*)<', svg_text)  # noqa: E731
    line = re.search(r'<polyline[^>]*points="([^"]*)"', svg_text)
    points = [tuple(map(float, p.split(","))) for p in line.group(1).split()] if line else []
    return ticks("ytick"), ticks("xtick"), re.findall(r"<title>([^<]*)</title>", svg_text), points


def test_charts_have_ticks_the_evaluation_is_one_line_and_flat_series_are_left_out(run, tmp_path):
    metrics = records(run, "metrics.jsonl")
    markup = dump(page(run), tmp_path)
    dom = Dom(markup)
    for el in dom.all("svg", "chart"):
        y, x, _, _ = chart_parts(markup, el["attrs"]["data-metric"])
        assert len(y) >= 2 and len(x) >= 2, el["attrs"]["data-metric"]  # round values along both axes
    y, x, dots, line = chart_parts(markup, "eval/success")
    assert y == ["0", "0.5", "1.0"] and x == ["0", "1", "2"]  # a rate: 0 to 1 in steps of 0.5; steps 0..2
    # one point per evaluation, in order: the start, after the warm start (marked), the end; all on one line
    want = [f"step 0: {js_fmt(metrics[0]['eval/success'])}", f"after warm start: {js_fmt(metrics[0]['warm/success'])}",
            f"step 2: {js_fmt(metrics[-1]['eval/success'])}"]
    assert dots == want and len(line) == 3 and line[0][0] == line[1][0] < line[2][0]
    assert len(dom.all("circle", "marked")) == 1
    # the warm start's loss per step, from warm_start.jsonl
    warm = records(run, "warm_start.jsonl")
    _, x, dots, line = chart_parts(markup, "warm/loss_bc")
    assert x == ["1", "2"] and len(line) == len(warm) == 2
    assert dots == [f"warm-start step {w['warm_step']}: {js_fmt(w['loss_bc'])}" for w in warm]
    # flat series are not drawn, but named with their value (here the tiny model's success stays 0, and others)
    drawn = {e["attrs"]["data-metric"] for e in dom.all("svg", "chart")}
    candidates = ["turns/mean", "eval/reward", "entropy", "loss/policy", "approx_kl", "clip_frac", "grad_norm",
                  "loss/value", "tokens_per_s", "mem/peak_rss_gb"]
    for k in candidates:
        ys = [m[k] for m in metrics if k in m]
        if len(ys) >= 2 and max(ys) - min(ys) <= 1e-6 * max(1, abs(max(ys)), abs(min(ys))):
            assert k not in drawn and f"{k} = " in text(dom.one(id="flat")), k
        elif ys:
            assert k in drawn, k


def test_time_per_phase(run, tmp_path):
    metrics = records(run, "metrics.jsonl")
    rows = phase_rows(dump(page(run), tmp_path))
    later = metrics[1:]
    want = [("evaluation at the start", metrics[0]["time/eval"]), ("warm start", metrics[0]["time/warm_start"]),
            ("evaluation after the warm start", metrics[0]["time/eval_warm_start"]),
            ("rollouts (2 steps)", sum(m["time/rollout"] for m in later)),
            ("updates (2 steps)", sum(m["time/update"] for m in later)),
            ("later evaluations", sum(m.get("time/eval", 0) for m in later))]
    assert [r[0] for r in rows] == [w[0] for w in want]
    for r, (_, sec) in zip(rows, want):  # every phase here is under a minute
        assert r[1] == f"{sec:.1f} s"
    total = sum(sec for _, sec in want)
    assert [int(r[2].split()[0]) for r in rows] == [round(100 * sec / total) for _, sec in want]


def test_step_view_shows_groups_side_by_side(run, tmp_path):
    dom = browse(page(run, "step/1"), tmp_path)
    recs = [r for r in records(run) if r["step"] == 1]
    groups = dom.all("section", "group")
    assert len(groups) == len({r["group_id"] for r in recs}) == 2
    assert len(dom.all("a", "card")) == len(recs)
    assert len(dom.all(cls="sq")) == sum(len(r["steps"]) for r in recs)  # one square per turn


@pytest.mark.parametrize("mode", ["logprob", "entropy", "advantage"])
def test_trajectory_view_colours_every_reply_token(run, tmp_path, mode):
    shot = tmp_path / f"traj-{mode}.png"
    dom = browse(page(run, f"traj/2/1?tok={mode}"), tmp_path, screenshot=shot if mode == "entropy" else None)
    rec = [r for r in records(run) if r["step"] == 2][1]
    turns = dom.all("section", "turn")
    assert len(turns) == len(rec["steps"])
    toks = dom.all("span", "tok")
    assert len(toks) == sum(len(s["tokens"]["text"]) for s in rec["steps"])
    colours = [t["attrs"].get("style", "") for t in toks]
    assert all("background" in c for c in colours)
    if mode != "advantage":  # per token; the advantage is per turn (broadcast to its tokens)
        assert len(set(colours)) > 1
    badges = [text(b) for b in dom.all("span", "badge")]
    shown = [float(b.split()[1]) for b in badges if b.startswith("advantage ")]
    assert shown == pytest.approx(rec["flags"]["advantages"], abs=1e-3)  # one per turn, 3 decimals
    assert any(b.startswith("value ") for b in badges) and any(b.startswith("uncertainty ") for b in badges)
    prompts = [text(p) for p in dom.all("pre", "prompt")]
    assert len(prompts) == len(rec["steps"]) and prompts[0].startswith("<|im_start|>system")
    assert all(prompts[k].startswith(prompts[k - 1]) for k in range(1, len(prompts)))  # rebuilt from tails
    assert dom.one(id="token-modes")


def test_search_tree_is_drawn_with_its_kept_path(run, tmp_path):
    trees = [t for t in records(run, "search_trees.jsonl") if t["step"] == 1]
    dom = browse(page(run, "tree/1/0"), tmp_path)
    assert dom.one("svg", "tree")["attrs"]["data-nodes"] == str(len(trees[0]["nodes"]))
    assert len(dom.all("circle", "node")) == len(trees[0]["nodes"])
    assert len(dom.all("line", "kept")) == sum(n.get("kept", False) for n in trees[0]["nodes"]) - 1


def test_best_and_worst_side_by_side(run, tmp_path):
    dom = browse(page(run, "compare/1/0/1/1"), tmp_path)
    sides = dom.all("div", "side")
    recs = [r for r in records(run) if r["step"] == 1]
    assert len(sides) == 2
    assert len(dom.all("section", "turn")) == len(recs[0]["steps"]) + len(recs[1]["steps"])


def test_filters_and_text_search_select_the_matching_trajectories(run, tmp_path):
    recs = records(run)
    needle = [r for r in recs if r["step"] == 2][1]["steps"][0]["action_text"].strip()[:12]

    def searchable(r):  # what the page searches: task, request, replies, observations, state keys
        parts = [r["task"]["id"], request(run, r), r["task"]["instruction"]]
        return "\n".join(parts + [x for s in r["steps"] for x in (s["action_text"], s["observation"], s["state_key"])])

    want = [r for r in recs if r["step"] == 2 and r["reward"] <= 0 and not r["success"]
            and needle.lower() in searchable(r).lower()]
    q = urllib.request.quote(needle)
    dom = browse(page(run, f"list?success=no&rmax=0&smin=2&q={q}"), tmp_path)
    assert dom.one(id="match-count")["attrs"]["data-count"] == str(len(want)) and len(want) >= 1
    assert len(dom.all("tr", "traj-row")) == len(want)
    dom = browse(page(run, "list?success=yes&rmin=100"), tmp_path)
    assert dom.one(id="match-count")["attrs"]["data-count"] == "0"


def test_export_round_trip_as_chat_jsonl(run, tmp_path):
    dom = browse(page(run, "list?smin=2&sel=all&show=export"), tmp_path)
    lines = [json.loads(line) for line in text(dom.one("pre", id="export-text")).splitlines()]
    recs = [r for r in records(run) if r["step"] == 2]
    assert len(lines) == len(recs)
    for line, rec in zip(lines, recs):
        msgs = line["messages"]
        assert [m["role"] for m in msgs[:2]] == ["system", "user"]
        assert msgs[0]["content"] == rec["system"] and msgs[1]["content"] == request(run, rec)
        assert [m["content"] for m in msgs if m["role"] == "assistant"] == [s["action_text"] for s in rec["steps"]]
        assert [m["content"] for m in msgs[2:] if m["role"] == "user"] == [s["observation"] for s in rec["steps"][:-1]]
        assert msgs[-1]["role"] == "assistant"
        assert line["metadata"]["reward"] == pytest.approx(rec["reward"]) and line["metadata"]["step"] == 2


def test_step_labels_of_a_judge_are_shown_per_turn(run, tmp_path):
    """reward.attribution keeps each step's GOOD/BAD label in info.attribution; the turn shows it as a badge."""
    labelled = tmp_path / "labelled"
    shutil.copytree(run, labelled, ignore=shutil.ignore_patterns("checkpoints", "tensorboard", "view.html"))
    recs = records(labelled)
    for k, s in enumerate(recs[0]["steps"]):
        s["info"]["attribution"] = {"label": "GOOD" if k == 0 else "BAD", "rationale": "why", "source": "oracle"}
    (labelled / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert CliRunner().invoke(app, ["view", str(labelled)]).exit_code == 0
    badges = [text(b) for b in browse(page(labelled, "traj/1/0"), tmp_path).all("span", "badge")]
    labels = [b for b in badges if b.startswith("step label")]
    assert labels == ["step label (oracle) GOOD"] + ["step label (oracle) BAD"] * (len(recs[0]["steps"]) - 1)


# ---- held-out evaluations ------------------------------------------------------------------------------------

EVALS = [(0, "start"), (0, "after warm start"), (2, "end")]


def evaluations(run: Path) -> list[list[dict]]:
    """eval_trajectories.jsonl's episodes, one list per evaluation, in the order the run took them."""
    recs = records(run, "eval_trajectories.jsonl")
    return [[r for r in recs if (r["eval"]["step"], r["eval"]["label"]) == key] for key in EVALS]


def grid_rows(observation: str) -> list[list[str]]:
    """The grid of a FrozenLake observation by hand: its lines of single characters between spaces."""
    return [line.split(" ") for line in observation.splitlines() if re.fullmatch(r"\S( \S)+", line)]


def test_every_evaluation_is_listed_with_its_episodes(run, tmp_path):
    evs = evaluations(run)
    assert [len(e) for e in evs] == [2, 2, 2]
    dom = browse(page(run, "evals"), tmp_path)
    rows = dom.all("tr", "eval-row")
    assert [r["attrs"]["data-k"] for r in rows] == ["0", "1", "2"]
    markup = dump(page(run, "evals"), tmp_path)
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r'<tr class="eval-row"[^>]*>(.*?)</tr>', markup)]
    assert [c[:3] for c in cells] == [[label, str(step), f"{sum(r['success'] for r in e)}/2"]
                                      for (step, label), e in zip(EVALS, evs)]
    # the run trained on 3x3 train maps only, so every held-out task is unseen: 0/0 seen, each evaluation's own count unseen
    assert [c[3:5] for c in cells] == [["0/0", f"{sum(r['success'] for r in e)}/2"] for e in evs]
    assert len(dom.all("tr", "task-row")) == 2  # task by task across the evaluations
    dom = browse(page(run, "eval/2"), tmp_path)
    cards = dom.all("a", "ecard")
    assert [c["attrs"]["data-index"] for c in cards] == ["0", "1"]
    assert [("ok" in c["attrs"]["class"]) for c in cards] == [r["success"] for r in evs[2]]
    maps = dom.all("table", "small")  # each episode's map beside it: the 3x3 board of its first observation
    assert [(m["attrs"]["data-rows"], m["attrs"]["data-cols"]) for m in maps] == [("3", "3")] * 2
    failed = sum(not r["success"] for r in evs[2])
    assert browse(page(run, "eval/2?show=failed"), tmp_path).one("div", "ecards")["attrs"]["data-cards"] == str(failed)


def test_an_evaluation_episode_opens_like_a_training_trajectory(run, tmp_path):
    rec = evaluations(run)[2][1]
    dom = browse(page(run, "traj/e2/1"), tmp_path)
    assert len(dom.all("section", "turn")) == len(rec["steps"])
    assert len(dom.all("span", "tok")) == sum(len(s["tokens"]["text"]) for s in rec["steps"])
    badges = [text(b) for b in dom.all("span", "badge")]
    assert "evaluation end, step 2" in badges and f"task {rec['task']['id']}" in badges
    assert not any(b.startswith("advantage") for b in badges)  # an evaluation trains nothing: no advantage
    links = [e["attrs"]["href"] for e in dom.all("a") if e["attrs"].get("href", "").startswith("#/compare/e")]
    assert links == ["#/compare/e0/1/e2/1", "#/compare/e1/1/e2/1"]  # the same task before, side by side
    dom = browse(page(run, "compare/e0/1/e2/1"), tmp_path)
    before = evaluations(run)[0][1]
    assert len(dom.all("section", "turn")) == len(before["steps"]) + len(rec["steps"])


def test_seen_and_unseen_tasks_are_marked(run, tmp_path):
    marked = tmp_path / "marked"
    shutil.copytree(run, marked, ignore=shutil.ignore_patterns("checkpoints", "tensorboard", "view.html"))
    recs = records(marked, "eval_trajectories.jsonl")
    for r in recs:  # the first task as if its map had been trained on, the second as never seen
        r["eval"]["seen"] = r["task"]["id"].endswith("0")
    (marked / "eval_trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert CliRunner().invoke(app, ["view", str(marked)]).exit_code == 0
    markup = dump(page(marked, "evals"), tmp_path)
    head = re.search(r'<table class="eval-runs">(.*?)</tr>', markup).group(1)
    assert re.findall(r"<th>(.*?)</th>", head) == ["evaluation", "step", "solved", "seen in training", "unseen", ""]
    evs = evaluations(marked)
    for row, e in zip(re.findall(r'<tr class="eval-row"[^>]*>(.*?)</tr>', markup), evs):
        seen = [r for r in e if r["eval"]["seen"]]
        unseen = [r for r in e if not r["eval"]["seen"]]
        assert re.findall(r"<td>(.*?)</td>", row)[3:5] == [f"{sum(r['success'] for r in seen)}/1",
                                                            f"{sum(r['success'] for r in unseen)}/1"]
    dom = browse(page(marked, "eval/0?show=unseen"), tmp_path)
    assert dom.one("div", "ecards")["attrs"]["data-cards"] == "1"
    assert [text(b) for b in dom.all("span", "unseen")][-1] == "unseen never trained on"
    badges = [text(b) for b in browse(page(marked, "traj/e0/0"), tmp_path).all("span", "badge")]
    assert "seen in training" in badges


def test_grid_observations_are_drawn_as_grids(run, tmp_path):
    rec = [r for r in records(run) if r["step"] == 1][0]
    markup = dump(page(run, "traj/1/0"), tmp_path)
    grids = re.findall(r'<table class="grid" data-rows="(\d+)" data-cols="(\d+)">(.*?)</table>', markup)
    shown = [rec["flags"].get("query") or request(run, rec)] + [s["observation"] for s in rec["steps"]]
    want = [grid_rows(o) for o in shown if len(grid_rows(o)) >= 2]
    assert len(grids) == len(want) >= 2  # the task's first observation and every observation with a board
    for (rows, cols, body), cells in zip(grids, want):
        assert (int(rows), int(cols)) == (len(cells), len(cells[0])) == (3, 3)
        assert re.findall(r"<td[^>]*>(.*?)</td>", body) == [c for row in cells for c in row]  # "_" cells too
    assert "Left:" in markup.split('class="obs gridobs"', 1)[1].split("</div>", 1)[0]  # the hint stays text
    dom = browse(page(run, "step/1"), tmp_path)  # each group's map beside it
    groups = dom.all("section", "group")
    assert len(dom.all("table", "small")) == len(groups) == 2


def test_a_prompt_opens_at_its_end(run, tmp_path):
    markup = dump(page(run, "traj/2/1?prompts=open"), tmp_path)
    boxes = re.findall(r'<div class="scroll-end"><pre class="prompt">', markup)
    assert len(boxes) == len([r for r in records(run) if r["step"] == 2][1]["steps"])
    css = (run / "view.html").read_text().split("<style>")[1].split("</style>")[0]
    assert ".scroll-end { display: flex; flex-direction: column-reverse;" in css  # starts scrolled to the end


def test_unused_columns_are_left_out(run, tmp_path):
    heads = lambda m: re.findall(r"<th>(.*?)</th>", m.split('<table class="list">')[1].split("</tr>")[0])  # noqa
    assert heads(dump(page(run, "list"), tmp_path)) == ["", "step", "group", "task", "reward", "success", "turns",
                                                         "advantage", ""]  # no judge ran: no judge column
    judged = tmp_path / "judged"
    shutil.copytree(run, judged, ignore=shutil.ignore_patterns("checkpoints", "tensorboard", "view.html"))
    recs = records(judged)
    recs[0]["flags"]["judge_score"] = 0.5
    (judged / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert CliRunner().invoke(app, ["view", str(judged)]).exit_code == 0
    assert "judge" in heads(dump(page(judged, "list"), tmp_path))


# ---- untrusted run folders ------------------------------------------------------------------------------------

ATTACK = '</script><script>document.documentElement.setAttribute("data-pwned","1")</script>'
IMG = '<img src=x onerror="document.documentElement.setAttribute(\'data-pwned\',\'2\')">'


def test_a_crafted_run_renders_as_text_and_bad_lines_are_skipped(run, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(run, bad, ignore=shutil.ignore_patterns("checkpoints", "tensorboard", "view.html"))
    recs = records(bad)
    r = recs[0]
    r["task"]["id"] = IMG
    r["flags"]["query"] = ATTACK + IMG
    s = r["steps"][0]
    s["action_text"] = ATTACK + IMG
    s["observation"] = IMG + "\u2028" + ATTACK
    s["prompt"]["text"] = ATTACK
    s["tokens"]["text"][0] = ATTACK
    s["info"]["x"] = IMG
    lines = [json.dumps(x) for x in recs]
    lines[1] = lines[1][: len(lines[1]) // 2]  # a line cut by a crash
    lines += ["not json at all", '{"step": "one", "steps": 5}', '{"step": 1, "steps": [{"reward": "x"}, 3]}',
              "[" * 100_000]
    (bad / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    with (bad / "config.yaml").open("a") as f:
        f.write(f"weird: .nan\nwhen: 2026-01-01\n7: seven\nnote: '{ATTACK}'\n")  # loads; none of it is JSON
    with (bad / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "reward/mean": NaN}\n{"step": 4, "' + IMG + '": 1}\n')
    episodes = records(bad, "eval_trajectories.jsonl")
    episodes[0]["eval"] = {"step": "0", "label": ATTACK, "seen": "yes"}  # wrong types: read as text or unknown
    episodes[0]["flags"]["query"] = IMG + "\n_ _\n_ _"  # a grid after crafted text
    lines = [json.dumps(x) for x in episodes] + ['{"step": 0, "steps": [], "eval": 5}', "{cut"]
    (bad / "eval_trajectories.jsonl").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, ["view", str(bad), "--out", str(tmp_path / "bad.html")])
    assert result.exit_code == 0, result.output
    assert "5 bad line(s) in trajectories.jsonl skipped" in result.output
    assert "1 bad line(s) in eval_trajectories.jsonl skipped" in result.output  # "{cut"; eval: 5 is no eval
    html_text = (tmp_path / "bad.html").read_text()
    assert ATTACK not in html_text and "<img" not in html_text.split("</style>")[1]
    url = (tmp_path / "bad.html").as_uri()
    for view in ["", "traj/1/0", "list?q=script", "step/1", "compare/1/0/1/0", "evals", "eval/0", "traj/e0/0"]:
        dom = browse(f"{url}#/{view}", tmp_path)
        assert "data-pwned" not in dom.root_attrs, view  # nothing from the run ran
        assert not dom.all("img") and not [e for e in dom.all() if any(k.startswith("on") for k in e["attrs"])]
        scripts = dom.all("script")
        assert sum("type" not in e["attrs"] for e in scripts) == 1  # the page's own script only
    dom = browse(f"{url}#/traj/1/0", tmp_path)
    assert text(dom.all("span", "tok")[0]) == ATTACK  # shown as the text it is
    assert any(IMG in text(p) for p in dom.all("pre", "obs")) and ATTACK + IMG in [text(p) for p in dom.all("pre")]
    assert any(IMG in text(b) for b in dom.all("span", "badge"))  # the task id, shown as text
    dom = browse(url, tmp_path)
    assert any("5 malformed" in text(p) for p in dom.all("p", "warn"))


@pytest.mark.parametrize("how, said", [("missing", "trajectories.jsonl is missing"),
                                       ("a folder", "trajectories.jsonl is not a file")])
def test_a_missing_trajectories_file_is_said_not_shown_as_an_empty_run(run, tmp_path, how, said):
    folder = tmp_path / "run"
    shutil.copytree(run, folder, ignore=shutil.ignore_patterns("checkpoints", "tensorboard", "view.html"))
    (folder / "trajectories.jsonl").unlink()
    if how == "a folder":
        (folder / "trajectories.jsonl").mkdir()
    result = CliRunner().invoke(app, ["view", str(folder), "--out", str(tmp_path / "v.html")])
    assert result.exit_code == 0, result.output
    assert "0 trajectories" in result.output and said in result.output.replace("\n", "")
    dom = browse((tmp_path / "v.html").as_uri(), tmp_path)
    assert any(said in text(p) for p in dom.all("p", "warn"))


# ---- --serve --------------------------------------------------------------------------------------------------

def test_serve_sends_each_step_on_demand(run, tmp_path):
    server = make_server(load_run(run), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        home = urllib.request.urlopen(base + "/").read().decode()
        assert 'id="steps-1"' not in home and '"mode":"serve"' in home  # the steps are not in the page
        step = json.loads(urllib.request.urlopen(base + "/data/steps/2.json").read())
        assert len(step) == 4 and step[0]["step"] == 2
        episodes = json.loads(urllib.request.urlopen(base + "/data/evals/2.json").read())
        assert [e["eval"]["label"] for e in episodes] == ["end", "end"]
        assert 'id="evals-2"' not in home and 'id="evals-2"' in (run / "view.html").read_text()
        for path in ["/data/steps/../../etc/passwd", "/config.yaml", "/data/steps/x.json"]:
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(base + path)
            assert e.value.code == 404
        dom = browse(f"{base}/#/traj/2/1?tok=entropy", tmp_path)  # fetched by the page, under its policy
        assert len(dom.all("section", "turn")) == len([r for r in records(run) if r["step"] == 2][1]["steps"])
        dom = browse(f"{base}/#/tree/2/1", tmp_path)
        assert dom.all("circle", "node")
        word = urllib.request.quote(records(run)[5]["steps"][0]["action_text"].strip()[:8])
        served = browse(f"{base}/#/list?q={word}", tmp_path).one(id="match-count")["attrs"]["data-count"]
        in_file = browse(page(run, f"list?q={word}"), tmp_path).one(id="match-count")["attrs"]["data-count"]
        assert served == in_file != "0"  # the server's search finds what the page's own search finds
    finally:
        server.shutdown()
        server.server_close()
