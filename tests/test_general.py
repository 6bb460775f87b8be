"""What training does to the rest of the model: the fixed general questions, scored for a run and its base."""

from __future__ import annotations

from selfevolve import Trainer, load_config
from selfevolve.train.general import QUESTIONS, answered, general_knowledge

from conftest import invoke


def test_a_reply_counts_when_it_holds_an_accepted_answer():
    assert answered("The capital of France is Paris.", ("paris",))
    assert answered("A week is approximately 7 days.", ("seven", "7"))
    assert not answered("Il Coriobella, Italy.", ("rome",)) and not answered("", ("paris",))
    assert len(QUESTIONS) == 20 and len({q for q, _ in QUESTIONS}) == 20


def test_general_knowledge_is_scored_in_evaluation_and_by_the_eval_command(tmp_path):
    """The tiny random model answers none; the score is a metric of every evaluation with eval.general=true, and
    `selfevolve eval RUN --general` prints it for the run and for its base model."""
    cfg = load_config(overrides=["model.name=tiny", "env.size=3", "train.steps=0", "train.warm_start_steps=0",
                                 "eval.episodes=2", "eval.general=true", f"train.out_dir={tmp_path}",
                                 "train.progress=false"])
    trainer = Trainer(cfg)
    result = trainer.train()
    assert result["eval/general"] == 0.0
    scored = general_knowledge(trainer.policy)
    assert len(scored["replies"]) == 20 and scored["correct"] == 0.0
    code, err, output = invoke("eval", str(tmp_path), "--general")
    assert code == 0, output
    assert "eval/general: 0.0000" in output and "eval/general_base: 0.0000" in output


def test_a_scaled_adapter_interpolates_between_the_base_and_the_trained_model():
    """adapter_scaled(0) is the base model (the adapter off), 1 the trained one, and the LoRA scales come back
    after; on a linear layer the update at scale k is k times the full update (W x + k·s·B A x)."""
    import torch

    from selfevolve.build import build_policy

    policy = build_policy(load_config(overrides=["model.name=tiny"]))
    torch.manual_seed(0)
    for name, p in policy.model.named_parameters():
        if "lora_B" in name:  # B starts at 0 (no update); give the adapter something to say
            p.data.normal_(0, 0.5)
    ids = torch.tensor([[1, 5, 9, 3]])

    def logits():
        with torch.no_grad():
            return policy.model(input_ids=ids).logits

    trained = logits()
    with policy.reference():
        base = logits()
    with policy.adapter_scaled(0.0):
        assert torch.allclose(logits(), base, atol=1e-5)
    with policy.adapter_scaled(0.5):
        half = logits()
        assert not torch.allclose(half, base, atol=1e-3) and not torch.allclose(half, trained, atol=1e-3)
    assert torch.allclose(logits(), trained, atol=0)  # restored exactly

    from peft.tuners.lora.layer import Linear

    layer = next(m for m in policy.model.modules() if isinstance(m, Linear))
    x = torch.randn(2, layer.in_features)
    with torch.no_grad():
        full = layer(x) - layer.base_layer(x)
        with policy.adapter_scaled(0.25):
            quarter = layer(x) - layer.base_layer(x)
    assert torch.allclose(quarter, 0.25 * full, atol=1e-6)


def test_eval_command_scales_the_adapter(tmp_path):
    cfg = load_config(overrides=["model.name=tiny", "env.size=3", "train.steps=0", "train.warm_start_steps=0",
                                 "eval.episodes=2", f"train.out_dir={tmp_path}", "train.progress=false"])
    Trainer(cfg).train()
    code, err, output = invoke("eval", str(tmp_path), "eval.adapter_scale=0.5", "--general")
    assert code == 0, output
    assert "eval/general: 0.0000" in output
    code, err, output = invoke("eval", str(tmp_path), "eval.adapter_scale=9")
    assert code == 2 and "eval.adapter_scale" in err
