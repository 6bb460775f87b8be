"""A run folder may come from someone else: loading it (resume, eval, model.init_from, another run's experience
pool) never runs code from it, and a malformed file is refused with exit 2 and a message naming the file.

The malicious files are real: a pickle whose loading creates a marker file (shown to work by loading it once
with ``weights_only=False``, as selfevolve before 0.2 did), a YAML python tag, SQLite views and triggers.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TINY, assert_user_error, invoke
from selfevolve.errors import SelfEvolveError
from selfevolve.experience.pool import ExperiencePool, NewItem
from selfevolve.train.checkpoint import optimizer_from_file, optimizer_to_file, rng_from_json, rng_to_json


class Planted:
    """Unpickling this opens (creates) ``path``: what a crafted rng.pt can do, with something harmless."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A one-step tiny run (checkpoints step-0 and step-1), made once; tests work on copies."""
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("safety") / "run"
    code, err, output = invoke("train", *TINY, "train.steps=1", f"train.out_dir={run}")
    assert code == 0, output
    return run


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def resume(run: Path, steps: int = 2):
    return invoke("train", *TINY, f"train.steps={steps}", "train.resume=true", f"train.out_dir={run}")


def plant(folder: Path, marker: Path) -> None:
    for name in ("rng.pt", "optimizer.pt"):
        torch.save({"python": Planted(marker)}, folder / name)


def test_the_planted_pickle_is_live(tmp_path):
    """The test's payload really runs when unpickled (so its absence below means something)."""
    marker = tmp_path / "ran"
    plant(tmp_path, marker)
    torch.load(tmp_path / "rng.pt", weights_only=False)
    assert marker.exists()


def test_pickles_beside_a_checkpoint_are_never_opened(run, tmp_path):
    marker = tmp_path / "ran"
    for step in ("step-0", "step-1"):
        plant(run / "checkpoints" / step, marker)
    code, err, output = resume(run)
    assert code == 0, output
    code, _, output = invoke("eval", run, "eval.episodes=1")
    assert code == 0, output
    other = tmp_path / "other"
    code, _, output = invoke("train", *TINY, "train.steps=1", f"model.init_from={run}", f"train.out_dir={other}")
    assert code == 0, output
    assert not marker.exists()


def test_a_pickled_checkpoint_of_an_old_version_is_refused_and_kept(run, tmp_path):
    """Before 0.2 the optimizer and RNG state were pickles: resume refuses them (naming the files) and leaves
    the run as it was; eval and init_from still work, as they read only the adapter, state and config."""
    marker = tmp_path / "ran"
    for step in ("step-0", "step-1"):
        folder = run / "checkpoints" / step
        (folder / "rng.json").unlink()
        (folder / "optimizer.safetensors").unlink()
        plant(folder, marker)
    metrics = (run / "metrics.jsonl").read_text()
    code, err, output = resume(run)
    assert_user_error(code, err, output, "step-1", "optimizer.pt, rng.pt", "never loaded", "selfevolve eval")
    assert (run / "metrics.jsonl").read_text() == metrics  # nothing removed, nothing restarted
    assert (run / "checkpoints" / "step-1").is_dir()
    code, _, output = invoke("eval", run, "eval.episodes=1")
    assert code == 0, output
    assert not marker.exists()


CORRUPT = [
    ("rng.json", "not json", "rng.json"),
    ("rng.json", json.dumps({"python": [3, [1, 2], None], "torch": "", "sampler": ""}), "rng.json"),
    ("rng.json", json.dumps({"python": [3, [0] * 624 + [624], None], "torch": "AAAA", "sampler": "AAAA"}),
     "rng.json"),  # a valid Python state, torch states of the wrong size
    ("state.json", json.dumps({"step": "1", "task_cursor": 2}), "state.json"),
    ("state.json", "[" * 100_000, "state.json"),
    ("optimizer.safetensors", "garbage", "optimizer.safetensors"),
    ("adapter.safetensors", "garbage", "adapter.safetensors"),
]


@pytest.mark.parametrize("name, content, needle", CORRUPT, ids=[f"{c[0]}-{i}" for i, c in enumerate(CORRUPT)])
def test_a_corrupt_checkpoint_file_is_refused_by_name(run, name, content, needle):
    (run / "checkpoints" / "step-1" / name).write_text(content)
    code, err, output = resume(run)
    assert_user_error(code, err, output, needle)


def test_a_config_with_python_tags_is_refused(run, tmp_path):
    marker = tmp_path / "ran"
    evil = f"!!python/object/apply:builtins.open [{str(marker)!r}, 'w']\n"
    (run / "checkpoints" / "step-1" / "config.yaml").write_text(evil)
    code, err, output = invoke("eval", run / "checkpoints" / "step-1")
    assert_user_error(code, err, output, "config.yaml", "not a valid config")
    (run / "config.yaml").write_text("model: &a [*a]\n")  # an alias: refused before anything expands it
    code, err, output = resume(run)
    assert_user_error(code, err, output, "config.yaml", "aliases")
    assert not marker.exists()


def test_resume_removes_what_a_killed_checkpoint_write_left(run):
    """kill -9 during a checkpoint write leaves checkpoints/.tmp-* (and latest.tmp) behind: resume removes them."""
    root = run / "checkpoints"
    half = root / ".tmp-k1ll3d"
    half.mkdir()
    (half / "adapter.safetensors").write_bytes(b"half a file")
    (root / "latest.tmp").write_text("step-")
    code, err, output = resume(run)
    assert code == 0, output
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-1", "step-2"]


def test_latest_pointing_outside_the_run_is_not_followed(run):
    (run / "checkpoints" / "latest").write_text("../../../etc")
    (run / "checkpoints" / "step-x").mkdir()  # a folder name that is no step number
    code, err, output = resume(run)
    assert code == 0, output
    assert "from step 1" in err


# ---- the file formats, by hand --------------------------------------------------------------------------------
def test_optimizer_and_rng_round_trip_exactly():
    p = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(p.parameters(), lr=1e-3, betas=(0.8, 0.9))
    p(torch.randn(4, 3)).sum().backward()
    opt.step()
    tensors, meta = optimizer_to_file(opt.state_dict())
    assert set(tensors) == {f"state.{i}.{k}" for i in (0, 1) for k in ("step", "exp_avg", "exp_avg_sq")}
    back = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters())
    back.load_state_dict(optimizer_from_file(tensors, meta))
    assert back.param_groups[0]["betas"] == [0.8, 0.9] and back.param_groups[0]["lr"] == 1e-3
    for a, b in zip(opt.state_dict()["state"].values(), back.state_dict()["state"].values()):
        assert all(torch.equal(a[k], b[k]) for k in a)
    import random

    gen = torch.Generator().manual_seed(5)
    rng = {"python": random.Random(3).getstate(), "torch": torch.get_rng_state(), "sampler": gen.get_state()}
    again = rng_from_json(rng_to_json(rng))
    assert again["python"] == rng["python"]
    assert torch.equal(again["torch"], rng["torch"]) and torch.equal(again["sampler"], rng["sampler"])
    with pytest.raises(ValueError):
        optimizer_from_file({"weights.0": torch.zeros(1)}, meta)


# ---- another run's experience pool ----------------------------------------------------------------------------
class Hashing:
    """A deterministic 8-d embedder (the pool's checks do not depend on what the vectors mean)."""

    name, dim = "hashing-8", 8

    def encode(self, texts):
        return np.stack([np.frombuffer(np.random.default_rng(abs(hash(t)) % 2**32).random(8).astype(np.float32)
                                       .tobytes(), np.float32) for t in texts]) if texts else np.zeros((0, 8), np.float32)


def _pool(path: Path) -> Path:
    pool = ExperiencePool(path, Hashing())
    pool.add([NewItem("trajectory", "a request and its actions", "a request", tools=["get_order"],
                      turns=[("hi", "<tool_call>{}</tool_call>")], success=True)], step=0, origin="seed")
    pool.close()
    return path


@pytest.mark.parametrize("attack, needle", [
    ("CREATE TRIGGER t AFTER INSERT ON items BEGIN DELETE FROM meta; END", "trigger 't'"),
    ("CREATE VIEW v AS SELECT 1", "view 'v'"),
    ("UPDATE items SET embedding = x'00'", "row 1"),
    ("UPDATE items SET tools = '" + "[" * 5000 + "'", "row 1"),
    ("UPDATE items SET turns = '[[1, 2]]'", "row 1"),
    ("UPDATE items SET text = x'00ff'", "row 1"),
])
def test_a_crafted_pool_is_refused_by_name(tmp_path, attack, needle):
    other = _pool(tmp_path / "other.sqlite")
    with sqlite3.connect(other) as conn:
        conn.execute(attack)
    mine = ExperiencePool(tmp_path / "mine.sqlite", Hashing())
    with pytest.raises(SelfEvolveError, match="other.sqlite") as e:  # experience.pool=PATH
        mine.import_from(other)
    assert needle in str(e.value)
    assert mine.count() == 0
    with pytest.raises(SelfEvolveError, match="other.sqlite") as e:  # the pool of a run being resumed or evaluated
        ExperiencePool(other, Hashing()).items()
    assert needle in str(e.value)


def test_a_clean_pool_imports(tmp_path):
    mine = ExperiencePool(tmp_path / "mine.sqlite", Hashing())
    assert mine.import_from(_pool(tmp_path / "other.sqlite")) == 1
    assert mine.items()[0].tools == ["get_order"]
