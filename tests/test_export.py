"""``selfevolve export``: the merged folder reloads with plain transformers and gives the adapter model's logits."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM

from conftest import assert_user_error, invoke
from served_run import make_run
from selfevolve.export import export_run, logits_of, model_label, probe_ids
from selfevolve.models.loading import load_model
from selfevolve.models.policy import Policy
from selfevolve.train.run import load_run


def test_export_reloads_with_the_adapter_models_logits(tmp_path):
    root, _ = make_run(tmp_path / "run")
    report = export_run(root, tmp_path / "out")
    out = tmp_path / "out"
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "selfevolve_export.json"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pth", ".pkl")) for n in names)  # no pickles
    assert all(p.stat().st_mode & 0o044 == 0o044 for p in out.iterdir())  # readable by others: shareable
    _, policy, _ = load_run(root)  # the adapter model, loaded afresh
    ids = probe_ids(policy.tokenizer)
    expected = logits_of(policy.model, ids)
    with policy.reference():
        base = logits_of(policy.model, ids)
    assert (expected - base).abs().max() > 1.0  # the adapter changes the model: the comparison means something
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    assert type(reloaded).__name__ == "LlamaForCausalLM"
    assert torch.allclose(logits_of(reloaded, ids), expected, atol=1e-3)
    info = json.loads((out / "selfevolve_export.json").read_text())
    assert info["checkpoint_step"] == 1 and info["base_model"] == "tiny" and info == report
    # where it came from, relative to the run: nothing of this machine's folders goes with a shared model
    assert info["run"] == "run" and info["checkpoint"] == "checkpoints/step-1"
    assert str(tmp_path) not in (out / "selfevolve_export.json").read_text()
    assert report["max_abs_logit_diff"] < 1e-3


def test_the_exported_folder_is_a_model_name_with_the_same_greedy_replies(tmp_path):
    root, _ = make_run(tmp_path / "run", seed=3)
    export_run(root, tmp_path / "out")
    _, policy, _ = load_run(root)
    model, tok = load_model(str(tmp_path / "out"), "fp32")
    exported = Policy(model, tok, max_new_tokens=12)
    prompts = [probe_ids(tok)[:40], [1, 520, 9531, 198]]
    policy.temperature = 1.0
    assert exported.generate(prompts, greedy=True).ids == policy.generate(prompts, greedy=True, max_new_tokens=12).ids


def test_export_command_refuses_a_non_empty_folder_and_a_missing_run(tmp_path):
    root, _ = make_run(tmp_path / "run")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    code, err, out = invoke("export", str(root), "--out", str(tmp_path / "busy"))
    assert_user_error(code, err, out, "the folder is not empty", "--overwrite")
    assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"
    code, err, out = invoke("export", str(tmp_path / "nothing"), "--out", str(tmp_path / "o"))
    assert_user_error(code, err, out, "no such run or checkpoint folder")
    code, err, out = invoke("export", str(root), "--out", str(tmp_path / "busy"), "--overwrite")
    assert code == 0, out
    assert "max |logit difference|" in out and not (tmp_path / "busy" / "keep.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind


def test_a_local_base_model_is_recorded_by_its_name_only(tmp_path):
    (tmp_path / "my-model").mkdir()
    assert model_label(str(tmp_path / "my-model")) == "my-model"
    assert model_label("/nowhere/else/model") == "model"  # absolute: a path even where it does not exist
    assert model_label("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"  # a hub id
    assert model_label("smollm2-135m") == "smollm2-135m"
