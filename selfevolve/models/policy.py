"""The policy: a causal LM with a LoRA adapter, and the two things RL asks of it.

- :meth:`Policy.generate` — batched sampling with per-token log-probs and uncertainty statistics (rollouts);
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
from selfevolve.models.generation import Generation, KVState, generate


def common_prefix(seqs: list[list[int]]) -> list[int]:
    if not seqs:
        return []
    first, n = seqs[0], min(len(s) for s in seqs)
    i = 0
    while i < n and all(s[i] == first[i] for s in seqs):
        i += 1
    return first[:i]


class Policy:
    def __init__(self, model, tokenizer, lora=None, temperature: float = 1.0, max_new_tokens: int = 8):
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        if lora is not None and not isinstance(model, PeftModel):
            # No LoRA dropout: the update must see the same function that sampled (PPO ratio = 1 on-policy).
            model = get_peft_model(
                model,
                PeftLoraConfig(
                    r=lora.r,
                    lora_alpha=lora.alpha,
                    lora_dropout=0.0,
                    target_modules=list(lora.target_modules),
                    task_type="CAUSAL_LM",
                ),
            )
        self.model = model
        self.stop_ids = end_of_turn_ids(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    # ---- rollouts -------------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(
        self,
        prompts: list[list[int]],
        *,
        greedy: bool = False,
        generator: torch.Generator | None = None,
        state: KVState | None = None,
    ) -> Generation:
        """Sample replies; ``state`` is the previous turn's ``Generation.state`` for the same rows (optional)."""
        was_training = self.model.training
        self.model.eval()
        try:
            prefix = [] if state is not None and state.extends(prompts) else common_prefix(prompts)
            # The shared prefix (system prompt + few-shot turns) is encoded once for the whole batch; every
            # prompt must keep at least one token of its own.
            if prefix and len(prefix) >= min(len(p) for p in prompts):
                prefix = prefix[:-1]
            return generate(
                self.model,
                prompts,
                max_new_tokens=self.max_new_tokens,
                stop_ids=self.stop_ids,
                pad_id=self.pad_id,
                temperature=self.temperature,
                greedy=greedy,
                generator=generator,
                prefix_ids=prefix if len(prefix) >= 16 and len(prompts) > 1 else None,
                state=state,
            )
        finally:
            self.model.train(was_training)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ---- updates --------------------------------------------------------------------------------------------
    def _body_and_head(self):
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
    ):
        """Log-probs of ``input_ids`` at the positions where ``loss_mask`` is 1, as a flat vector.

        ``loss_mask[b, j] = 1`` marks token j as a model-generated token: it is predicted from the hidden state at
        j − 1. Returns ``(logprobs [n], entropy [n] or None)`` in the order of ``loss_mask.nonzero()``.

        ``prefix_len``: the first ``prefix_len`` tokens are the same in every row and carry no loss (the system
        prompt and few-shot turns). They are encoded once and their keys/values shared by all rows — gradients
        flow back through the sharing, so the result equals the plain computation at a fraction of the cost.
        """
        body, head = self._body_and_head()
        P = prefix_len
        if P > 0 and input_ids.shape[0] > 1:
            assert not loss_mask[:, : P + 1].any(), "the shared prefix must carry no loss"
            cache = DynamicCache()
            body(input_ids=input_ids[:1, :P], past_key_values=cache, use_cache=True)
            cache.batch_repeat_interleave(input_ids.shape[0])
            rest = input_ids[:, P:]
            positions = torch.arange(P, input_ids.shape[1], device=input_ids.device)[None].expand_as(rest)
            hidden = body(input_ids=rest, attention_mask=attention_mask, position_ids=positions,
                          past_key_values=cache, use_cache=True).last_hidden_state
            input_ids, loss_mask = rest, loss_mask[:, P:]
        else:
            hidden = body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        sel = loss_mask[:, 1:].bool()
        h = hidden[:, :-1][sel]
        logits = head(h).float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        targets = input_ids[:, 1:][sel]
        logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
        entropy = None
        if with_entropy:
            with torch.no_grad():
                entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

    @contextlib.contextmanager
    def reference(self):
        """The reference policy: the base model with the LoRA adapter disabled."""
        if isinstance(self.model, PeftModel):
            with self.model.disable_adapter():
                yield
        else:
            yield

    def trainable_parameters(self):
        return [p for p in self.model.parameters() if p.requires_grad]

    # ---- persistence ----------------------------------------------------------------------------------------
    def adapter_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items() if "lora_" in k}

    def load_adapter_state(self, state: dict[str, torch.Tensor]) -> None:
        own = {k for k in self.model.state_dict() if "lora_" in k}
        unexpected, missing = set(state) - own, own - set(state)
        if unexpected or missing:
            key = sorted(unexpected or missing)[0]
            raise SelfEvolveError(f"the adapter does not fit this model (e.g. {key!r}); was it trained with "
                                  f"another model.name or model.lora settings?")
        try:
            self.model.load_state_dict(state, strict=False)
        except RuntimeError as e:
            raise SelfEvolveError(f"the adapter does not fit this model: {str(e).splitlines()[0]}") from None

    def save_adapter(self, path) -> None:
        """A standard PEFT adapter folder (loadable with ``PeftModel.from_pretrained``)."""
        if isinstance(self.model, PeftModel):
            self.model.save_pretrained(str(path))

