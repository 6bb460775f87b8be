"""The TRL side of ``bench_vs_trl.py``: one GRPOTrainer run per process, timed without changing it.

Runs in a Python that has ``trl==1.16.0`` (the extra ``selfevolve[peers]``); imports from selfevolve only the
FrozenLake world and its turn template for the multi-turn rollout function (the same world on both sides).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench_vs_trl import FROZENLAKE, GROUP, LR, PROMPTS_PER_STEP, peak_rss_gb, reward


def run_trl(plan: dict, regime: str, tokens: int, out_dir: Path, grad_ckpt: bool) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(plan["seed"])
    tok = AutoTokenizer.from_pretrained(plan["trl_model"])
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(plan["trl_model"], dtype=torch.float32)
    tasks = plan["fl_tasks"] if regime == "frozenlake" else plan["tasks"][regime]
    data = Dataset.from_list([{"prompt": t["messages"], "seed": t["seed"]} for t in tasks])

    def digit_reward(completions, seed, **_):
        return [reward(regime, s, c[0]["content"]) for c, s in zip(completions, seed, strict=True)]

    def episode_reward(completions, episode_reward, **_):  # the rollout function's sum of the env's rewards
        return list(episode_reward)

    rollouts: list[float] = []
    step_logs: list[dict] = []

    class TimedGRPO(GRPOTrainer):
        """Times the rollout (generation and rewards: ``_generate_and_score_completions``); changes nothing."""

        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            rollouts.append(time.perf_counter() - t0)
            return out

    class Clock(TrainerCallback):
        """A step's wall time: from one optimizer step's end to the next (data, rollout, update, logging)."""

        def __init__(self):
            self.last, self.totals = 0.0, []

        def on_train_begin(self, *a, **k):
            self.last = time.perf_counter()

        def on_step_end(self, *a, **k):
            now = time.perf_counter()
            self.totals.append(now - self.last)
            self.last = now

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "frac_reward_zero_std" in logs:  # the step's log (the last one is the run's summary)
                step_logs.append(dict(logs))

    clock = Clock()
    config = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=PROMPTS_PER_STEP * GROUP, num_generations=GROUP,
        steps_per_generation=1, num_iterations=1, gradient_accumulation_steps=1,
        max_completion_length=tokens if regime != "frozenlake" else 512, max_steps=plan["warmup"] + plan["steps"], learning_rate=LR,
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, epsilon=0.2, epsilon_high=0.28, max_grad_norm=1.0,
        bf16=False, fp16=False, use_cpu=True, gradient_checkpointing=grad_ckpt, shuffle_dataset=False,
        seed=plan["seed"], logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True,
        dataloader_num_workers=0,
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      task_type="CAUSAL_LM")
    multi = regime == "frozenlake"
    trainer = TimedGRPO(model=model, reward_funcs=episode_reward if multi else digit_reward, args=config,
                        train_dataset=data, processing_class=tok, peft_config=lora, callbacks=[clock],
                        rollout_func=frozenlake_rollout(tasks, tokens) if multi else None)
    prompt_tokens = len(tok.apply_chat_template(tasks[0]["messages"], add_generation_prompt=True,
                                                tokenize=True, return_dict=True)["input_ids"])
    trainer.train()
    steps = [{"total": total, "rollout": roll, "update": total - roll,
              "metrics": {"frac_reward_zero_std": log.get("frac_reward_zero_std"),
                          "completion_length": log.get("completions/mean_length")}}
             for total, roll, log in zip(clock.totals, rollouts, step_logs, strict=True)]
    return {"steps": steps, "prompt_tokens": prompt_tokens, "peak_rss_gb": peak_rss_gb()}


def frozenlake_rollout(tasks: list[dict], tokens: int):
    """TRL's ``rollout_func`` for FrozenLake episodes of up to 3 turns, written as a TRL user would: each turn,
    ``generate`` on every unfinished episode's whole conversation so far (left-padded), then the environment's
    answer appended as a user turn. The completion is every reply and observation after the prompt; ``env_mask``
    keeps the observations out of the loss. The environment and the turn's template ids are selfevolve's (the same
    world and the same prompts as the selfevolve side)."""
    import torch

    from selfevolve.agent.prompt import appended_turn_ids
    from selfevolve.envs import make_env

    seed_of = {t["messages"][-1]["content"]: t["seed"] for t in tasks}  # the prompt's map -> its task seed

    def rollout(prompts, trainer):
        tok = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        eot = tok.convert_tokens_to_ids("<|im_end|>")
        envs = [make_env("frozenlake", **FROZENLAKE) for _ in prompts]
        for env, p in zip(envs, prompts, strict=True):
            env.reset(seed_of[p[-1]["content"]])
        prompt_ids = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)
                      ["input_ids"] for p in prompts]
        n = len(prompts)
        completion, mask, logps, totals = [[] for _ in range(n)], [[] for _ in range(n)], [[] for _ in range(n)], [0.0] * n
        active = list(range(n))
        for turn in range(FROZENLAKE["max_turns"]):
            seqs = [prompt_ids[i] + completion[i] for i in active]
            width = max(len(q) for q in seqs)
            ids = torch.tensor([[tok.pad_token_id] * (width - len(q)) + q for q in seqs])
            attention = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in seqs])
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=attention, max_new_tokens=tokens, do_sample=True,
                                     temperature=1.0, top_k=0, top_p=1.0, eos_token_id=eot,
                                     pad_token_id=tok.pad_token_id, return_dict_in_generate=True, output_scores=True)
            new = out.sequences[:, width:]
            lp = torch.stack(out.scores, 1).log_softmax(-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
            still = []
            for row, i in enumerate(active):
                reply = new[row].tolist()
                if eot in reply:
                    reply = reply[:reply.index(eot) + 1]
                completion[i] += reply
                mask[i] += [1] * len(reply)
                logps[i] += lp[row, :len(reply)].tolist()
                result = envs[i].step(tok.decode(reply, skip_special_tokens=True))
                totals[i] += result.reward
                if not result.done and turn + 1 < FROZENLAKE["max_turns"]:
                    env_ids = ([] if reply[-1] == eot else [eot]) + appended_turn_ids(
                        tok, {"role": "user", "content": result.observation})
                    completion[i] += env_ids
                    mask[i] += [0] * len(env_ids)
                    logps[i] += [0.0] * len(env_ids)
                    still.append(i)
            active = still
            if not active:
                break
        return {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": logps, "env_mask": mask,
                "episode_reward": totals}

    return rollout


def check_tools(model_path: str) -> str:
    """What TRL 1.16 says when its own multi-turn tool loop is asked to run on SmolLM2's tokenizer: the trainer
    with a tool, and the response parser it would add for it (``add_response_schema``)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import add_response_schema

    def move(direction: str) -> str:
        """Move one square on the FrozenLake grid.

        Args:
            direction: Left, Down, Right or Up.

        Returns:
            The grid after the move.
        """
        return direction

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            GRPOTrainer(model=model, reward_funcs=lambda completions, **_: [0.0] * len(completions),
                        args=GRPOConfig(output_dir=tmp, use_cpu=True, bf16=False, report_to=[], num_generations=2,
                                        per_device_train_batch_size=2),
                        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "Go."}]}]),
                        processing_class=tok, tools=[move])
            found.append("GRPOTrainer(tools=[move]): accepted")
        except Exception as e:  # what TRL raises is the finding
            found.append(f"GRPOTrainer(tools=[move]): {type(e).__name__}: {e}")
    try:
        add_response_schema(tok)
        found.append("add_response_schema: accepted")
    except Exception as e:
        found.append(f"add_response_schema: {type(e).__name__}: {str(e).split('. Please')[0]}")
    return "\n".join(found)
