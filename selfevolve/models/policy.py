"""The policy: a causal LM with a LoRA adapter, and the two things RL asks of it.

- :meth:`Policy.generate` — batched sampling with per-token log-probs and uncertainty statistics (rollouts): the
  Hugging Face implementation of the :class:`~selfevolve.models.sampler.Sampler` that rollouts and search use;
- :meth:`Policy.action_logprobs` — log-probs of given action tokens under the current weights (the update),
  computed only at the positions that carry loss: the full-vocabulary logits of every prompt position would
  dominate memory (49k × sequence length × batch), and we never need them.

The reference policy for the KL penalty is the same model with the adapter disabled: no second copy of the
weights.
"""

from __future__ import annotations

import contextlib

import torch
from transformers import DynamicCache
from peft import LoraConfig as PeftLoraConfig
from peft import PeftModel, get_peft_model

from selfevolve.agent.prompt import end_of_turn_ids
from selfevolve.errors import ConfigError, SelfEvolveError
from selfevolve.models.compat import cache_kwargs
from selfevolve.models.generation import KVState, extend_cache, generate, read_values
from selfevolve.models.prefix_sharing import encode_rows
from selfevolve.models.sampler import Generation
from selfevolve.models.sampler_precision import SamplerWeights
from selfevolve.models.value_head import ValueHead
from selfevolve.models.window_masks import windowed

VALUE_PREFIX = "value_head."


def common_prefix(seqs: list[list[int]]) -> list[int]:
    if not seqs:
        return []
    first, n = seqs[0], min(len(s) for s in seqs)
    i = 0
    while i < n and all(s[i] == first[i] for s in seqs):
        i += 1
    return first[:i]


def check_target_modules(model, targets) -> None:
    """ConfigError unless every name of ``model.lora.target_modules`` names linear layers of ``model`` (peft
    matches a name against the end of a module's dotted path). peft itself fails only when no name matches,
    with its own exception, and skips the others silently."""
    linear = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    for target in targets:
        if not any(n == target or n.endswith("." + target) for n in linear):
            leaves = sorted({n.rsplit(".", 1)[-1] for n in linear} - {"lm_head"})
            raise ConfigError(f"model.lora.target_modules: {target!r} names no linear layer of the model; "
                              f"allowed: {', '.join(leaves)}")


class Policy:
    def __init__(self, model, tokenizer, lora=None, temperature: float = 1.0, max_new_tokens: int = 8):
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        if lora is not None and not isinstance(model, PeftModel):
            # No LoRA dropout: the update must see the same function that sampled (PPO ratio = 1 on-policy).
            # top_layers: adapters only on the last N layers, so no gradient is needed below them and the
            # backward stops there.
            n_layers = model.config.num_hidden_layers
            top = lora.top_layers
            if top is not None and top > n_layers:
                raise ConfigError(f"model.lora.top_layers={top}, but the model has {n_layers} layers")
            check_target_modules(model, lora.target_modules)
            model = get_peft_model(
                model,
                PeftLoraConfig(
                    r=lora.r,
                    lora_alpha=lora.alpha,
                    lora_dropout=0.0,
                    target_modules=list(lora.target_modules),
                    layers_to_transform=None if top is None else list(range(n_layers - top, n_layers)),
                    task_type="CAUSAL_LM",
                ),
            )
        self.model = model
        self.value_head: ValueHead | None = None
        self.sampler_weights: SamplerWeights | None = None  # set by :meth:`sample_in`
        self.matmul_dtype: torch.dtype | None = None  # the body's products' precision, where build set another
        self.update_products = None  # models/matmul_precision.UpdateProducts: that precision in the update only
        self.constraint_factory = None  # set by :meth:`constrained`
        self.stop_ids = end_of_turn_ids(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    # ---- rollouts -------------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Size of the output distribution (the logits' last dimension; SELAUR's |V|)."""
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def has_values(self) -> bool:
        return self.value_head is not None

    def stream(self, seed: int) -> torch.Generator:
        """A random stream for :meth:`generate`: a generator on the model's device (the same draws for one dtype
        whatever the device; see ``generation._uniform``)."""
        return torch.Generator(device=self.device).manual_seed(seed)

    def generate(
        self,
        prompts: list[list[int]],
        *,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        state: KVState | None = None,
        max_new_tokens: int | None = None,
        share_prefix: bool = True,
        constraint=None,
    ) -> Generation:
        """Sample replies; ``state`` is the previous turn's ``Generation.state`` for the same rows (optional);
        ``max_new_tokens`` overrides the reply budget for this call (e.g. a context-manager call);
        ``share_prefix=False`` encodes every prompt in full, each row's own (only for measuring what the sharing
        of prefixes and of prompts that several rows share saves). ``constraint``: one grammar per prompt
        (``models/constrained.py``); without it, the grammars of :meth:`constrained`, if one is active."""
        factory = getattr(self, "constraint_factory", None)
        if constraint is None and factory is not None:
            constraint = factory(len(prompts))
        with self._eval_mode(), self.sampling():
            reuse = state is not None and state.extends(prompts)
            prefix = self._shared_prefix(prompts) if share_prefix and not reuse else None
            return generate(
                self.model,
                prompts,
                max_new_tokens=max_new_tokens or self.max_new_tokens,
                stop_ids=self.stop_ids,
                pad_id=self.pad_id,
                temperature=self.temperature,
                greedy=greedy,
                generator=generator,
                prefix_ids=prefix,
                state=state,
                dedupe=share_prefix,
                constraint=constraint,
            )

    @contextlib.contextmanager
    def constrained(self, factory):
        """Within the block, every :meth:`generate` call without its own constraint is constrained by
        ``factory(number of prompts)`` (a :class:`~selfevolve.models.constrained.Constrained`): e.g. exploration's
        answers masked to the game's moves, through the rollout engine unchanged."""
        before, self.constraint_factory = getattr(self, "constraint_factory", None), factory
        try:
            yield
        finally:
            self.constraint_factory = before

    @staticmethod
    def _shared_prefix(prompts: list[list[int]]) -> list[int] | None:
        """The prefix all prompts share (system prompt + few-shot turns), encoded once for the whole batch; every
        prompt keeps at least one token of its own. None when too short to be worth it or for a single prompt."""
        prefix = common_prefix(prompts)
        if prefix and len(prefix) >= min(len(p) for p in prompts):
            prefix = prefix[:-1]
        return prefix if len(prefix) >= 16 and len(prompts) > 1 else None

    def state_values(self, prompts: list[list[int]], suffix: list[int], state: KVState | None = None):
        """``(values, state, tokens encoded)``: the value head read at the end of ``prompt + suffix`` for each
        prompt, and a cache that the next :meth:`generate` of the same prompts continues from (see
        ``generation.read_values``)."""
        if self.value_head is None:
            raise ConfigError("reading state values needs a value head (algo.name=self_ac or ppo)")
        with self._eval_mode(), self.sampling():
            body, _ = self.body_and_head()
            return read_values(body, self.value_head, prompts, suffix, state)

    def prefill(self, prompts: list[list[int]], state: KVState | None = None, share_prefix: bool = True):
        """``(state, tokens encoded)``: each prompt but its last token encoded into a cache (over ``state`` when
        the prompts extend it), ready for :meth:`generate` — and for copying to several candidates first."""
        with self._eval_mode(), self.sampling():
            body, _ = self.body_and_head()
            prefix = self._shared_prefix(prompts) if share_prefix and state is None else None
            _, new_state, encoded = extend_cache(body, prompts, [], state, prefix_ids=prefix)
            return new_state, encoded

    def sample_in(self, dtype: torch.dtype) -> None:
        """Generate (:meth:`generate`, :meth:`prefill`, :meth:`state_values`) with the frozen base in ``dtype``
        while the update keeps the model's own (``model.sampler_dtype``; ``models/sampler_precision.py``)."""
        self.sampler_weights = SamplerWeights(self.model, dtype)

    def updating(self):
        """The block in which the update runs: the body's products in ``model.matmul_dtype=bf16_update``'s
        precision where it is set (``models/matmul_precision.py``)."""
        return self.update_products.active() if self.update_products is not None else contextlib.nullcontext()

    def sampling(self):
        """The block in which generation runs: the sampler's precision where :meth:`sample_in` set one."""
        return self.sampler_weights.active() if self.sampler_weights is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def _eval_mode(self):
        was_training = self.model.training
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ---- updates --------------------------------------------------------------------------------------------
    def attach_value_head(self, kind: str = "linear") -> ValueHead:
        """Add a critic head on this policy's own body (PPO, Self-AC); it joins ``trainable_parameters``."""
        hidden = self.model.get_input_embeddings().weight.shape[1]
        self.value_head = ValueHead(hidden, kind).to(self.device)
        return self.value_head

    def body_and_head(self):
        """The transformer body (hidden states) and the output head (logits) of the base model, under the adapter:
        the update reads log-probs and values from them directly, never the full-vocabulary logits of every
        position."""
        base = self.model.get_base_model() if isinstance(self.model, PeftModel) else self.model
        return base.get_decoder(), base.get_output_embeddings()

    def check_logprob_path(self) -> None:
        """The update reads log-probs from body + head directly; make sure that equals the model's own forward
        (models that rescale or soft-cap logits inside ``forward`` would silently break PPO ratios)."""
        ids = torch.tensor([[self.pad_id, *range(10, 17)]], device=self.device)
        mask = torch.ones_like(ids)
        loss_mask = torch.zeros_like(ids)
        loss_mask[0, 1:] = 1
        with torch.no_grad():
            mine, _ = self.action_logprobs(ids, mask, loss_mask)
            ref = torch.log_softmax(self.model(input_ids=ids).logits[0, :-1].float() / self.temperature, -1)
            ref = ref.gather(-1, ids[0, 1:, None]).squeeze(-1)
        if (mine - ref).abs().max() > 1e-2:
            raise ConfigError(
                "this model transforms its logits inside forward() (e.g. soft-capping or scaling); "
                "selfevolve's log-prob path does not support it yet"
            )

    def action_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        loss_mask: torch.Tensor,
        with_entropy: bool = False,
        prefix_len: int = 0,
        cuts: list[list[int]] | None = None,
    ):
        """Log-probs of ``input_ids`` at the positions where ``loss_mask`` is 1, as a flat vector.

        ``loss_mask[b, j] = 1`` marks token j as a model-generated token: it is predicted from the hidden state at
        j − 1. Returns ``(logprobs [n], entropy [n] or None)`` in the order of ``loss_mask.nonzero()``.

        ``prefix_len``: the first ``prefix_len`` tokens are the same in every row and carry no loss (the system
        prompt and few-shot turns). They are encoded once and their keys/values shared by all rows — gradients
        flow back through the sharing, so the result equals the plain computation at a fraction of the cost.
        ``cuts``: as in :meth:`forward_rows`.
        """
        logp, entropy, _ = self.forward_rows(input_ids, attention_mask, loss_mask, with_entropy=with_entropy,
                                             prefix_len=prefix_len, cuts=cuts)
        return logp, entropy

    def forward_rows(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        loss_mask: torch.Tensor | None,
        *,
        value_mask: torch.Tensor | None = None,
        with_entropy: bool = False,
        prefix_len: int = 0,
        cuts: list[list[int]] | None = None,
        prefix=None,
    ):
        """One forward of the body for both roles: ``(logprobs, entropy, values)``.

        Actor: as :meth:`action_logprobs` (``loss_mask`` None skips it). Critic: ``values`` [m] is the value head
        on the hidden state of every position where ``value_mask`` is 1, in the order of
        ``value_mask.nonzero()`` (None if no mask is given or no head is attached).

        ``cuts``: per row, the positions where its turns' segments begin (``samples.turn_cuts``): rows are then
        encoded as a tree, each distinct beginning once (``models/prefix_sharing.py``). ``prefix``: the first
        ``prefix_len`` ids encoded beforehand (``prefix_sharing.EncodedPrefix``).
        """
        body, head = self.body_and_head()
        hidden, columns, real = encode_rows(body, input_ids, attention_mask, prefix_len, cuts, prefix)
        # A loss token is predicted from the hidden state before it, a value read at its own position: both must
        # come after the shared prefix (``columns[:, 0]`` is its length).
        col = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        if loss_mask is not None:
            assert not (loss_mask.bool() & (col <= columns[:, :1])).any(), "the shared prefix must carry no loss"
            loss_mask = loss_mask.gather(1, columns) * real
        if value_mask is not None:
            assert not (value_mask.bool() & (col < columns[:, :1])).any(), "the shared prefix must carry no value"
            value_mask = value_mask.gather(1, columns) * real
        input_ids = input_ids.gather(1, columns)  # the own parts, as the hidden states are laid out
        values = None
        if value_mask is not None and self.value_head is not None:
            values = self.value_head(hidden[value_mask.bool()])
        if loss_mask is None:
            return None, None, values
        sel = loss_mask[:, 1:].bool()
        logp, entropy = self.token_logprobs(head, hidden[:, :-1][sel], input_ids[:, 1:][sel], with_entropy)
        return logp, entropy, values

    def encode_with_side_tokens(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None = None,
                                prefix_len: int = 0, side: tuple | None = None):
        """``(hidden [B, L, H], side_hidden [B, C, H] or None)``: the body's hidden states of ``ids`` and, in the
        same pass, of side tokens that attend to them without being seen by them (Self-AC's critic prompts,
        ``objectives/self_ac/shadow.py``).

        Stage 1 encodes ``ids`` at ``positions`` (causal, or the 4-D additive ``mask`` [B, 1, L, L]); its keys and
        values stay in one cache. Stage 2, ``side = (side_ids [B, C], side_positions, side_mask [B, 1, C, L + C])``,
        attends to that cache and to itself through ``side_mask``. Each token is encoded once; gradients reach
        stage 1 through the cached keys and values. ``prefix_len``: the first tokens every row shares (system
        prompt, few-shot turns), encoded once and their keys and values repeated for every row; gradients flow
        back through the sharing.
        """
        body, _ = self.body_and_head()
        cache = DynamicCache()
        with_cache = cache_kwargs(body, cache)
        # a sliding-window model's masks also hide the keys beyond its window, by position (models/window_masks.py)
        dtype = body.get_input_embeddings().weight.dtype
        P = prefix_len
        if P > 0:
            first = body(input_ids=ids[:1, :P], position_ids=positions[:1, :P], **with_cache,
                         use_cache=True).last_hidden_state
            cache.batch_repeat_interleave(ids.shape[0])
            rest_mask = windowed(body.config, None if mask is None else mask[:, :, P:], positions[:, P:], positions,
                                 dtype)
            rest = body(input_ids=ids[:, P:], attention_mask=rest_mask, position_ids=positions[:, P:], **with_cache,
                        use_cache=True).last_hidden_state
            hidden = torch.cat([first.expand(ids.shape[0], -1, -1), rest], dim=1)
        else:
            hidden = body(input_ids=ids, attention_mask=windowed(body.config, mask, positions, positions, dtype),
                          position_ids=positions, **with_cache, use_cache=True).last_hidden_state
        if side is None:
            return hidden, None
        side_ids, side_pos, side_mask = side
        side_mask = windowed(body.config, side_mask, side_pos, torch.cat([positions, side_pos], dim=1), dtype)
        side_hidden = body(input_ids=side_ids, attention_mask=side_mask, position_ids=side_pos, **with_cache,
                           use_cache=True).last_hidden_state
        return hidden, side_hidden

    def token_logprobs(self, head, h: torch.Tensor, targets: torch.Tensor, with_entropy: bool = False):
        """log π(target | h) at temperature ``self.temperature`` (the sampling distribution), and optionally the
        entropy of that distribution; full-vocabulary logits only at these positions."""
        logits = head(h).float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
        entropy = None
        if with_entropy:
            with torch.no_grad():
                entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    @contextlib.contextmanager
    def adapter_scaled(self, k: float):
        """The LoRA update weighted by ``k`` while inside: W + k·(alpha/r)·B·A. ``k`` between 0 (the base model) and
        1 (the trained one) interpolates the two, as WiSE-FT interpolates weights (Wortsman et al. 2022, eq. 1:
        θ = (1−α)·θ₀ + α·θ₁ — for a LoRA update the interpolation is this scaling of B·A). The scales of
        peft's LoRA layers are restored after."""
        from peft.tuners.lora.layer import LoraLayer

        layers = [m for m in self.model.modules() if isinstance(m, LoraLayer)] if k != 1 else []
        for m in layers:
            m.scale_layer(k)
        try:
            yield
        finally:
            for m in layers:
                m.unscale_layer()  # back to alpha / r

    @contextlib.contextmanager
    def reference(self):
        """The reference policy: the base model with the LoRA adapter disabled."""
        if isinstance(self.model, PeftModel):
            with self.model.disable_adapter():
                yield
        else:
            yield

    def trainable_parameters(self):
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.value_head is not None:
            params += list(self.value_head.parameters())
        return params

    # ---- persistence ----------------------------------------------------------------------------------------
    def adapter_state(self) -> dict[str, torch.Tensor]:
        """The trained weights: LoRA tensors, and the value head's under ``value_head.`` when there is one."""
        state = {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items() if "lora_" in k}
        if self.value_head is not None:
            state |= {VALUE_PREFIX + k: v.detach().cpu().clone() for k, v in self.value_head.state_dict().items()}
        return state

    def load_adapter_state(self, state: dict[str, torch.Tensor], value_head: str = "strict") -> None:
        """Load :meth:`adapter_state` output. ``value_head``: ``"strict"`` (the head must match: resume),
        ``"optional"`` (load it if both sides have one, e.g. starting PPO from a GRPO run) or ``"ignore"``."""
        lora = {k: v for k, v in state.items() if not k.startswith(VALUE_PREFIX)}
        critic = {k.removeprefix(VALUE_PREFIX): v for k, v in state.items() if k.startswith(VALUE_PREFIX)}
        own = {k for k in self.model.state_dict() if "lora_" in k}
        unexpected, missing = set(lora) - own, own - set(lora)
        if unexpected or missing:
            key = sorted(unexpected or missing)[0]
            raise SelfEvolveError(f"the adapter does not fit this model (e.g. {key!r}); was it trained with "
                                  f"another model.name or model.lora settings?")
        try:
            self.model.load_state_dict(lora, strict=False)
            if value_head == "ignore" or (value_head == "optional" and not (critic and self.value_head)):
                return
            if bool(critic) != (self.value_head is not None):
                has = "has a value head" if critic else "has no value head"
                raise SelfEvolveError(f"the checkpoint {has} but this run's algo.name "
                                      f"{'does not use' if critic else 'needs'} one")
            if critic:
                self.value_head.load_state_dict(critic)
        except RuntimeError as e:
            raise SelfEvolveError(f"the adapter does not fit this model: {str(e).splitlines()[0]}") from None

    def save_adapter(self, path) -> None:
        """A standard PEFT adapter folder (loadable with ``PeftModel.from_pretrained``)."""
        if isinstance(self.model, PeftModel):
            self.model.save_pretrained(str(path))

