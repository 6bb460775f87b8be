"""Bad input to the ``selfevolve`` command, as a table: input, expected exit status, expected words.

Every row runs the real command in-process (typer's runner, ``conftest.invoke``) on ``model.name=tiny``. A row
with exit status 2 must print one line starting ``error:`` that holds the expected words, within the bound on
message length, and no traceback; a row with status 0 must have run (the words are in its output). The rows are
the inputs that once ended in a traceback, were accepted silently or hung (issue 38), and their neighbours.
``{d}`` in a row stands for a folder of prepared files (see ``files``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from conftest import TINY, cli_env, invoke, joined
from selfevolve.errors import MAX_MESSAGE_CHARS

RUN = [*TINY, "train.warm_start_steps=0"]  # a 1-step run in seconds

ROWS = [
    # ---- the configuration file -----------------------------------------------------------------------------
    ("binary file", ["train", "{d}/binary.yaml"], 2, ["binary.yaml", "not a UTF-8 text file"]),
    ("empty file", ["train", "{d}/empty.yaml"], 2, ["empty.yaml", "holds no settings", "leave the file out"]),
    ("comments only", ["train", "{d}/comments.yaml"], 2, ["comments.yaml", "holds no settings"]),
    ("alias bomb", ["train", "{d}/bomb.yaml"], 2, ["bomb.yaml", "aliases", "line 2"]),
    ("alias bomb in an override", ["train", "model.name=tiny", "seed=[&a [1, 2], *a]"], 2, ["seed", "integer"]),
    ("a huge list where a number goes", ["train", "train.steps=[" + ",".join(["1"] * 200_000) + "]"], 2,
     ["train.steps", "valid integer", "...", "allowed: an integer >= 0"]),
    # ---- ranges ----------------------------------------------------------------------------------------------
    ("lr infinite", ["train", "algo.lr=.inf"], 2, ["algo.lr", "finite", "allowed: a finite number > 0 and <= 1"]),
    ("lr NaN", ["train", "algo.lr=.nan"], 2, ["algo.lr", "finite"]),
    ("lr too large for float32", ["train", "algo.lr=1e39"], 2, ["algo.lr", "less than or equal to 1"]),
    ("lr zero", ["train", "algo.lr=0"], 2, ["algo.lr", "greater than 0"]),
    ("temperature infinite", ["train", "agent.temperature=.inf"], 2, ["agent.temperature", "finite", ">= 0.01"]),
    ("temperature 1e-300", ["train", "agent.temperature=1e-300"], 2, ["agent.temperature", "0.01", "1e-300"]),
    ("dual clip 0.5", ["train", "algo.dual_clip=0.5"], 2, ["algo.dual_clip", "greater than 1", "(or null)"]),
    ("clip_low 5", ["train", "algo.clip_low=5"], 2, ["algo.clip_low", "less than 1", ">= 0 and < 1"]),
    ("clip_high negative", ["train", "algo.clip_high=-0.1"], 2, ["algo.clip_high", "greater than or equal to 0"]),
    ("max_grad_norm NaN", ["train", "algo.max_grad_norm=.nan"], 2, ["algo.max_grad_norm", "finite"]),
    ("request timeout infinite", ["train", "llm_api.timeout=.inf"], 2, ["llm_api.timeout", "finite"]),
    ("seed 2**64", ["train", "seed=18446744073709551616"], 2, ["seed", "2**64", "-2**63"]),
    ("seed below -2**63", ["train", "seed=-9223372036854775809"], 2, ["seed", "greater than or equal to"]),
    ("seed not a number", ["train", "seed=1.5"], 2, ["seed", "integer"]),
    ("no lora target", ["train", "model.lora.target_modules=[]"], 2, ["model.lora.target_modules", "at least 1"]),
    ("resume and overwrite", ["train", "train.resume=true", "train.overwrite=true"], 2,
     ["train.resume=true", "train.overwrite=true", "only one"]),
    # ---- what only the run finds: before anything is written -----------------------------------------------
    ("out_dir under a file", ["train", *RUN, "train.out_dir={d}/afile/run"], 2,
     ["afile", "is a file, not a folder"]),
    ("lora target that is no layer", ["train", *RUN, "model.lora.target_modules=[nope]", "train.out_dir={d}/r1"], 2,
     ["model.lora.target_modules", "'nope'", "q_proj", "down_proj"]),
    ("lora target that is not linear", ["train", *RUN, "model.lora.target_modules=[self_attn]",
                                        "train.out_dir={d}/r2"], 2, ["'self_attn'", "no linear layer"]),
    ("missing tasks_file", ["train", *RUN, "env.name=shop", "env.tasks_file={d}/nope.jsonl"], 2,
     ["tasks_file", "nope.jsonl", "no such file"]),
    ("tasks_file not text", ["train", *RUN, "env.name=tables", "env.tasks_file={d}/binary.yaml"], 2,
     ["tasks_file", "binary.yaml", "cannot be read"]),
    ("tasks_file with a bad line", ["train", *RUN, "env.name=shop", "env.tasks_file={d}/bad_tasks.jsonl"], 2,
     ["tasks_file", "line 2", "not a task"]),
    ("tasks_file a folder", ["train", *RUN, "env.name=shop", "env.tasks_file={d}"], 2, ["tasks_file", "cannot be read"]),
    ("unknown model name", ["train", "model.name=nosuchorg/nosuchmodel", "train.out_dir={d}/r3"], 2,
     ["model.name='nosuchorg/nosuchmodel'", "nothing is downloaded"]),
    ("pickled model weights", ["train", *RUN, "model.name={d}/pickled_model", "train.out_dir={d}/r4"], 2,
     ["pickled_model", "pickle", "safetensors"]),
    # ---- ports ---------------------------------------------------------------------------------------------
    ("serve port 99999", ["serve", "{d}/norun", "--port", "99999"], 2, ["--port 99999", "1-65535"]),
    ("serve port -1", ["serve", "{d}/norun", "--port", "-1"], 2, ["--port -1", "1-65535"]),
    ("view port 65536", ["view", "{d}/norun", "--serve", "--port", "65536"], 2, ["--port 65536", "1-65535"]),
    # ---- inputs at the edge that must run ------------------------------------------------------------------
    ("seed 2**64 - 1 runs", ["train", *RUN, "train.steps=1", "seed=18446744073709551615", "train.out_dir={d}/r5"],
     0, ["held-out success", "(seed 18446744073709551615)"]),
    ("seed -2**63 runs", ["train", *RUN, "train.steps=1", "seed=-9223372036854775808", "train.out_dir={d}/r6"],
     0, ["held-out success", "(seed -9223372036854775808)"]),
    # ---- generators: bounded attempts, impossible settings refused by name (envs/games/frozenlake*.py) --------------
    ("frozenlake with no path", ["train", *RUN, "env.size=6", "env.p_frozen=0.05", "train.out_dir={d}/r7"], 2,
     ["no map with a path", "p_frozen=0.05", "1000 draws"]),
    ("frozenlake of size 5000", ["train", *RUN, "env.size=5000"], 2, ["'size'", "from 2 to 16", "5000"]),
]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The folder ``{d}``: the files the rows name."""
    d = tmp_path_factory.mktemp("bad_input")
    (d / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (d / "empty.yaml").write_text("")
    (d / "comments.yaml").write_text("# nothing set\n\n")
    # a "billion laughs": 9 levels of 9 aliases, 387 million strings once expanded
    levels = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 9)]
    (d / "bomb.yaml").write_text("\n".join(levels) + "\nseed: *a8\n")
    (d / "afile").write_text("a file, not a folder")
    (d / "bad_tasks.jsonl").write_text('{"id": "x", "split": "train", "level": 1, "intent": "order_status", '
                                       '"instruction": "?", "goal": {}, "solution": []}\n{"id": "y"}\n')
    _pickled_model(d / "pickled_model", d / "PWNED")
    return d


class _Planted:
    """Unpickling this creates ``path``: what a crafted weights file can do, with something harmless."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def _pickled_model(folder, marker) -> None:
    """A model folder like tiny's whose ``pytorch_model.bin`` is a pickle that runs code when loaded."""
    from selfevolve.models.loading import load_model

    model, tok = load_model("tiny")
    model.config.save_pretrained(folder)
    tok.save_pretrained(folder)
    torch.save({"model.embed_tokens.weight": _Planted(marker)}, folder / "pytorch_model.bin")


def _ids(row) -> str:
    return row.values[0] if hasattr(row, "values") else row[0]


@pytest.mark.parametrize("name, args, code, words", ROWS, ids=[_ids(r) for r in ROWS])
def test_bad_input(files, name, args, code, words, monkeypatch):
    monkeypatch.chdir(files)  # a run that wrongly went ahead would write runs/ here, not in the checkout
    got, err, output = invoke(*[a.replace("{d}", str(files)) for a in args])
    assert got == code, (got, output[-3000:])
    assert "Traceback" not in output
    if code == 2:
        assert err.startswith("error: "), err
        assert len([line for line in output.splitlines() if line.startswith("error:")]) == 1, output
        assert len(err) <= len("error: ") + MAX_MESSAGE_CHARS + 40, len(err)
    for word in words:
        assert word in (err if code == 2 else joined(output)), (word, err or output)
    assert not (files / "PWNED").exists()  # the planted pickle never ran
    if code == 2:  # a refused run wrote nothing
        out = next((a.split("=", 1)[1] for a in args if a.startswith("train.out_dir=")), None)
        assert out is None or not os.path.exists(out.replace("{d}", str(files)))
        assert not (files / "runs").exists()


def test_an_unknown_model_name_fails_at_once_without_the_offline_switch(tmp_path):
    """Without HF_HUB_OFFLINE, loading an unknown hub id retried an unreachable hub for about 50 s; nothing is
    downloaded now, so it fails at once. (The bound is loose: the command's imports take seconds.)"""
    env = {k: v for k, v in cli_env().items() if k != "HF_HUB_OFFLINE"}
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "selfevolve.cli", "train", "model.name=nosuchorg/nosuchmodel",
                        f"train.out_dir={tmp_path / 'r'}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    took = time.monotonic() - start
    assert p.returncode == 2 and "nothing is downloaded" in joined(p.stderr), p.stderr[-2000:]
    assert "Retrying" not in p.stderr and took < 40, took


def test_the_table_covers_every_failure_of_issue_38():
    """The inputs the issue lists are rows here (so a figure in docs/security.md counts real cases)."""
    text = " ".join(" ".join(r.values[1] if hasattr(r, "values") else r[1]) for r in ROWS)
    for needle in ("binary.yaml", "afile/run", "seed=18446744073709551616", "target_modules=[nope]", "nope.jsonl",
                   "99999", "-1", "algo.lr=.inf", "agent.temperature=.inf", "agent.temperature=1e-300",
                   "algo.dual_clip=0.5", "algo.clip_low=5", "train.overwrite=true", "empty.yaml", "bomb.yaml",
                   "env.p_frozen=0.05", "env.size=5000", "nosuchorg"):
        assert needle in text, needle


# ---- a NaN or an infinity in training ------------------------------------------------------------------------
def _checkpoints(run) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").glob("step-*"))


@pytest.mark.parametrize("algo", ["ppo", "self_ac"])
def test_a_nan_loss_stops_the_run_before_the_optimizer_steps(tmp_path, algo):
    """A value head gone NaN makes the loss NaN: the run stops at step 1 naming it, the adapter is not stepped
    (no NaN reaches it) and the checkpoint of step 0 stays the latest."""
    from selfevolve.config import load_config
    from selfevolve.train.trainer import Trainer
    from selfevolve.objectives.update import NonFinite

    run = tmp_path / "run"
    cfg = load_config(overrides=[*RUN, f"algo.name={algo}", "train.steps=2", f"train.out_dir={run}"])
    trainer = Trainer(cfg)
    with torch.no_grad():
        trainer.policy.value_head.net.bias.fill_(float("nan"))
    lora = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters() if p.requires_grad}
    with pytest.raises(NonFinite, match=r"training stopped at step 1: the loss is not finite \(loss/.*=nan") as e:
        trainer.train()
    assert f"the last checkpoint, {run / 'checkpoints' / 'step-0'}, is the last good state" in str(e.value)
    for n, p in trainer.policy.model.named_parameters():
        if n in lora:
            assert torch.equal(p, lora[n]), n
    assert _checkpoints(run) == ["step-0"] and (run / "checkpoints" / "latest").read_text() == "step-0"


def test_a_nan_loss_is_a_one_line_error_of_the_command(tmp_path):
    """Resuming a run whose checkpoint holds a NaN value head: exit 2, the step named, step-1 kept as latest."""
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    args = [*RUN, "algo.name=ppo", f"train.out_dir={run}"]
    assert invoke("train", *args, "train.steps=1")[0] == 0
    path = run / "checkpoints" / "step-1" / "adapter.safetensors"
    tensors = load_file(path)
    tensors["value_head.net.bias"].fill_(float("nan"))
    save_file(tensors, path)
    code, err, output = invoke("train", *args, "train.steps=3", "train.resume=true")
    assert code == 2 and "Traceback" not in output, output[-3000:]
    assert err.endswith("is the last good state") and \
        "(step-1)error: training stopped at step 2: the loss is not finite" in err, err  # after "resuming ..."
    assert "step-1, is the last good state" in err
    assert _checkpoints(run) == ["step-0", "step-1"] and (run / "checkpoints" / "latest").read_text() == "step-1"
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]


def test_weights_that_overflow_in_the_step_stop_the_run():
    """The check after the step: a finite gradient times a huge step size overflows float32 to -inf."""
    from selfevolve.objectives.update import NonFinite, safe_step

    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 10.0)
    optimizer = torch.optim.SGD([p], lr=1e38)
    with pytest.raises(NonFinite, match="the weights are not finite after optimizer step 2 of the update"):
        safe_step(optimizer, [p], 1e9, {"loss/policy": 0.5}, 1)
    q = torch.nn.Parameter(torch.ones(3))
    q.grad = torch.tensor([1.0, float("inf"), 0.0])
    with pytest.raises(NonFinite, match="the gradient norm is (inf|nan) at optimizer step 1"):
        safe_step(torch.optim.SGD([q], lr=0.1), [q], 1.0, {}, 0)
    assert torch.equal(q.detach(), torch.ones(3))  # refused before the step


# ---- eval and export of a run whose model folder holds a pickle ------------------------------------------------
@pytest.mark.parametrize("command", ["eval", "export"])
def test_eval_and_export_refuse_pickled_model_weights(files, tmp_path, command):
    """A shared run may name a model folder whose pytorch_model.bin is a crafted pickle: exit 2 naming it
    (it was an UnpicklingError traceback), and the pickle never runs."""
    from served_run import make_run

    run, _ = make_run(tmp_path / "run")
    model = str(files / "pickled_model")
    for config in (run / "config.yaml", *run.glob("checkpoints/step-*/config.yaml")):
        if config.exists():
            config.write_text(config.read_text().replace("name: tiny", f"name: {model}"))
    extra = ["--out", str(tmp_path / "exported")] if command == "export" else []
    code, err, output = invoke(command, run, *extra)
    assert code == 2 and "Traceback" not in output, output[-3000:]
    assert err.startswith(f"error: model.name='{model}'") and "pickle" in err, err
    assert not (files / "PWNED").exists() and not (tmp_path / "exported").exists()
