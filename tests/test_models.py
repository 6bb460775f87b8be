"""Model loading: built-in names, local paths, clear errors, LoRA and the adapter-disabled reference."""

import pytest
import torch

from selfevolve.errors import ConfigError
from selfevolve.models.loading import load_model
from selfevolve.models.policy import Policy
from selfevolve.config import LoraConfig


def test_tiny_is_deterministic_and_uses_the_smollm2_tokenizer():
    a, tok = load_model("tiny", "fp32", seed=1)
    b, _ = load_model("tiny", "fp32", seed=1)
    c, _ = load_model("tiny", "fp32", seed=2)
    assert len(tok) == 49152 and tok.eos_token_id == 2 and tok.convert_tokens_to_ids("<|im_start|>") == 1
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_a_local_folder_loads_like_a_hub_id(tmp_path):
    model, tok = load_model("tiny", "fp32", seed=3)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = load_model(str(tmp_path), "fp32")
    assert torch.equal(again.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert tok2("Left").input_ids == tok("Left").input_ids


def test_unknown_models_and_dtypes_are_config_errors():
    with pytest.raises(ConfigError, match="not a built-in model"):
        load_model("/no/such/model")
    with pytest.raises(ConfigError, match="model.dtype"):
        load_model("tiny", "int3")


def test_reference_policy_is_the_base_model_with_the_adapter_disabled():
    model, tok = load_model("tiny", "fp32")
    ids = torch.tensor([[1, 5, 6, 7, 8]], device=model.device)
    with torch.no_grad():
        base = model(ids).logits.clone()
    policy = Policy(model, tok, lora=LoraConfig(r=4, alpha=8))
    n_base = sum(p.numel() for p in policy.model.parameters() if not p.requires_grad)
    n_lora = sum(p.numel() for p in policy.trainable_parameters())
    assert 0 < n_lora < n_base / 10  # only the adapter trains; no second copy of the weights exists
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(0.5)  # move the adapter away from the identity
        changed = policy.model(ids).logits
        with policy.reference():
            ref = policy.model(ids).logits
    assert not torch.allclose(changed, base, atol=1e-4)
    assert torch.allclose(ref, base, atol=1e-5)
