"""The training loop end to end, through the public Python API and the real code path."""

import collections
import json
import math

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from selfevolve import StepResult, TextEnv, Trainer, load_config
from selfevolve.models.loading import default_device
from selfevolve.rollout.runner import rollout
from selfevolve.tasks.source import seed_tasks
from selfevolve.errors import ConfigError, SelfEvolveError
from selfevolve.train.checkpoint import continue_optimizer
from selfevolve.train.trainer import build_policy, build_prompt

FAST = [
    "train.warm_start_steps=0", "train.warm_start_tasks=null",  # a warm start then takes tasks_per_step x group_size
    "model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=4", "train.tasks_per_step=2",
    "algo.group_size=4", "eval.episodes=2", "train.progress=false", "train.eval_every=0",
]


def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


class MagicWord(TextEnv):
    """A trivial world defined in user code (no registration): reward 1 when the reply contains the magic word.

    The magic word is a word the untrained tiny model already says now and then, so the reward starts low but
    not at zero and GRPO has something to amplify.
    """

    name = "magic"
    instructions = "Say the magic word."
    examples = []
    max_turns = 1
    target = ""

    def reset(self, seed):
        return "What is the magic word?"

    def step(self, action):
        r = float(self.target in action.split())
        return StepResult("ok", r, True, {"success": r > 0, "valid_action": True})


ALGOS = {
    "grpo": [],
    "rloo": ["algo.name=rloo"],
    "gigpo": ["algo.name=gigpo"],
    "ppo": ["algo.name=ppo"],
    "gigpo+selaur": ["algo.name=gigpo", "reward.shaping=selaur"],
    "gigpo+selaur+mean": ["algo.name=gigpo", "reward.shaping=selaur", "algo.norm=mean"],
    "ppo+selaur+filter": ["algo.name=ppo", "reward.shaping=selaur", "filter.keep=0.5"],
    "ppo-without-groups": ["algo.name=ppo", "algo.group_size=1"],  # the critic needs no group of rollouts
    "self_ac": ["algo.name=self_ac"],
    "self_ac-turn-per_turn": ["algo.name=self_ac", "algo.self_ac.ratio=turn", "algo.self_ac.forward=per_turn",
                              "algo.minibatches=2", "algo.kl_coef=0.01"],
    "self_ac+selaur+filter": ["algo.name=self_ac", "reward.shaping=selaur", "filter.keep=0.5"],
}


# SELAUR is tested for learning with norm=mean: with mean_std, a group of failures only turns its small
# uncertainty differences into unit-scale advantages, and on this one-word task that noise slowed learning
# below the threshold (measured; see docs/selaur.md).
@pytest.mark.parametrize("algo", ["grpo", "ppo", "gigpo", "gigpo+selaur+mean", "self_ac"])
def test_reward_rises_on_a_trivial_user_defined_env(tmp_path, algo):
    cfg = load_config(overrides=FAST + ALGOS[algo] + [
        "agent.max_new_tokens=3", "train.steps=20", "algo.lr=3e-3", "algo.group_size=8",
        f"train.out_dir={tmp_path / 'run'}",
    ])
    # pick the magic word: the first word the untrained model says most often
    policy = build_policy(cfg)
    builder = build_prompt(cfg, policy, MagicWord())
    tasks = seed_tasks("magic", 64)
    trajs = rollout(policy, [MagicWord() for _ in tasks], tasks, builder, max_turns=1,
                    generator=torch.Generator().manual_seed(0))
    words = collections.Counter((t.steps[0].action_text.split() or [""])[0] for t in trajs)
    MagicWord.target = words.most_common(1)[0][0]

    Trainer(cfg, env=MagicWord).train()
    rewards = [m["reward/mean"] for m in metrics(tmp_path / "run") if "reward/mean" in m]
    assert len(rewards) == 20
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last > first + 0.25, rewards
    if algo == "self_ac":
        # and the critic learns. Its raw TD loss grows with the reward's variance (all failures at first), so
        # it is compared with the loss a know-nothing critic (V ≡ 0, the zero-initialised head) has on the same
        # batch: exactly 1 at the first update, and it must fall.
        ratio = [m["value/loss_ratio"] for m in metrics(tmp_path / "run") if "value/loss_ratio" in m]
        assert ratio[0] == pytest.approx(1.0) and sum(ratio[-4:]) / 4 < 0.8, ratio


@pytest.mark.parametrize("algo", ["grpo", "ppo+selaur+filter", "self_ac+selaur+filter"])
def test_resume_gives_the_same_result_as_an_uninterrupted_run(tmp_path, algo):
    common = FAST + ALGOS[algo] + ["train.save_every=1", "env.size=3", "env.max_turns=2"]
    straight = tmp_path / "straight"
    Trainer(load_config(overrides=common + ["train.steps=3", f"train.out_dir={straight}"])).train()

    resumed = tmp_path / "resumed"
    Trainer(load_config(overrides=common + ["train.steps=2", f"train.out_dir={resumed}"])).train()
    Trainer(load_config(overrides=common + ["train.steps=3", f"train.out_dir={resumed}", "train.resume=true"])).train()

    a = {m["step"]: m for m in metrics(straight)}
    b = {m["step"]: m for m in metrics(resumed)}
    assert sorted(b) == [0, 1, 2, 3]  # each step once, including the one redone after the resume
    # exact on the CPU; GPU kernels (atomics in the backward, bf16) are not bit-reproducible: 1e-5 there
    tol = 1e-7 if default_device().type == "cpu" else 1e-5
    for key in ("reward/mean", "loss/actor" if "self_ac" in algo else "loss/policy", "grad_norm"):
        assert a[3][key] == pytest.approx(b[3][key], rel=1e-5, abs=tol), key
    # the update's entropy is measured on the rows it runs: absent when all were idle (zero advantage), in both
    assert ("entropy" in a[3]) == ("entropy" in b[3])
    assert a[3].get("entropy", 0.0) == pytest.approx(b[3].get("entropy", 0.0), rel=1e-5, abs=tol)
    wa = load_file(str(straight / "checkpoints" / "step-3" / "adapter.safetensors"))
    wb = load_file(str(resumed / "checkpoints" / "step-3" / "adapter.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
    ta = (straight / "trajectories.jsonl").read_text().splitlines()
    tb = (resumed / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(x)["steps"][0]["action_text"] for x in ta] == [json.loads(x)["steps"][0]["action_text"] for x in tb]


@pytest.mark.parametrize("algo", ["rloo", "gigpo", "ppo", "ppo-without-groups", "gigpo+selaur", "grpo_mean_kl",
                                  "self_ac", "self_ac-turn-per_turn", "self_ac+selaur+filter"])
def test_every_estimator_and_kl_run_end_to_end(tmp_path, algo):
    extra = ALGOS.get(algo, ["algo.norm=mean", "algo.kl_coef=0.01", "algo.minibatches=2"])
    out = tmp_path / algo
    Trainer(load_config(overrides=FAST + extra + ["train.steps=1", "env.max_turns=2", f"train.out_dir={out}"])).train()
    m = metrics(out)[-1]
    loss = "loss/actor" if algo.startswith("self_ac") else "loss/policy"
    assert m["step"] == 1 and math.isfinite(m[loss]) and "filter/zero_std_frac" in m
    if algo == "grpo_mean_kl":
        assert "kl" in m and m["kl"] == pytest.approx(0.0, abs=1e-6)  # first minibatch: adapter B = 0 -> policy = reference
    if algo.startswith(("ppo", "self_ac")):
        assert math.isfinite(m["loss/critic" if algo.startswith("self_ac") else "loss/value"])
        assert "value_head.net.weight" in load_file(str(out / "checkpoints" / "step-1" / "adapter.safetensors"))
    if algo.startswith("self_ac"):  # V(s_0..s_n) on every trajectory: n + 1 critic prompts
        for line in (out / "trajectories.jsonl").read_text().splitlines():
            t = json.loads(line)
            assert len(t["flags"]["values"]) == len(t["steps"]) + 1
    if "selaur" in algo:
        assert "reward/shaped_mean" in m
        shaped = [json.loads(x)["flags"]["shaped_reward"] for x in (out / "trajectories.jsonl").read_text().splitlines()]
        assert len(shaped) == 8 and all(math.isfinite(x) for x in shaped)


def test_a_run_starts_from_another_runs_adapter(tmp_path):
    first = tmp_path / "first"
    Trainer(load_config(overrides=FAST + ["train.steps=1", "algo.lr=1e-2", f"train.out_dir={first}"])).train()
    trained = load_file(str(first / "checkpoints" / "step-1" / "adapter.safetensors"))
    # a PPO run from a GRPO adapter: the LoRA weights carry over, the new value head starts at zero
    second = Trainer(load_config(overrides=FAST + ["algo.name=ppo", "train.steps=0", "eval.at_start=false",
                                                   f"model.init_from={first}", f"train.out_dir={tmp_path / 'second'}"]))
    state = second.policy.adapter_state()
    assert all(torch.equal(state[k], trained[k]) for k in trained)
    assert not state["value_head.net.weight"].any()
    second.train()
    logged = metrics(tmp_path / "second")
    assert logged == [{"step": 0, "mem/peak_rss_gb": logged[0]["mem/peak_rss_gb"]}]  # eval.at_start=false: nothing
    assert logged[0]["mem/peak_rss_gb"] > 0.1  # evaluated; the process's peak memory is logged every record


def test_init_optimizer_continues_another_runs_adam_moments_with_this_runs_learning_rate(tmp_path):
    first = tmp_path / "first"
    Trainer(load_config(overrides=FAST + ["train.steps=1", "algo.lr=1e-2", f"train.out_dir={first}"])).train()
    with safe_open(str(first / "checkpoints" / "step-1" / "optimizer.safetensors"), framework="pt") as f:
        saved = {k: f.get_tensor(k) for k in f.keys()}
    assert saved  # AdamW's moments of the first run's one update
    base = FAST + ["train.steps=0", "eval.at_start=false", "algo.lr=3e-4", f"model.init_from={first}"]
    fresh = Trainer(load_config(overrides=base + [f"train.out_dir={tmp_path / 'fresh'}"]))
    assert not fresh.optimizer.state  # by default a new run's optimizer starts afresh
    carried = Trainer(load_config(overrides=base + ["model.init_optimizer=true",
                                                    f"train.out_dir={tmp_path / 'carried'}"]))
    params = [p for g in carried.optimizer.param_groups for p in g["params"]]
    assert len(carried.optimizer.state) == len(params)
    for i, p in enumerate(params):
        assert torch.equal(carried.optimizer.state[p]["exp_avg"].cpu(), saved[f"state.{i}.exp_avg"])
        assert torch.equal(carried.optimizer.state[p]["exp_avg_sq"].cpu(), saved[f"state.{i}.exp_avg_sq"])
    assert float(carried.optimizer.state[params[0]]["step"]) == 1.0  # Adam's bias correction continues
    assert [g["lr"] for g in carried.optimizer.param_groups] == [3e-4]  # this run's, not the checkpoint's 1e-2


def test_init_optimizer_refuses_another_models_state_and_needs_init_from(tmp_path):
    first = tmp_path / "first"  # PPO: its optimizer also holds the value head's parameters
    Trainer(load_config(overrides=FAST + ["train.steps=1", "algo.name=ppo", f"train.out_dir={first}"])).train()
    other = FAST + ["train.steps=0", "eval.at_start=false", "model.init_optimizer=true", f"model.init_from={first}",
                    f"train.out_dir={tmp_path / 'other'}"]
    with pytest.raises(SelfEvolveError, match=r"optimizer\.safetensors: does not fit this run"):
        Trainer(load_config(overrides=other))  # GRPO's adapter loads (the value head is optional); its optimizer not
    with pytest.raises(ConfigError, match="set model.init_from too"):
        load_config(overrides=["model.init_optimizer=true"])
    (first / "checkpoints" / "step-1" / "optimizer.safetensors").unlink()  # the latest checkpoint's, not an older one's
    with pytest.raises(SelfEvolveError, match=r"step-1: no optimizer\.safetensors .* model\.init_optimizer=false"):
        Trainer(load_config(overrides=other))
    w = torch.nn.Parameter(torch.zeros(2, 3))
    opt = torch.optim.AdamW([w])
    state = {"state": {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(3, 2), "exp_avg_sq": torch.zeros(3, 2)}},
             "param_groups": [{**{k: v for k, v in opt.param_groups[0].items() if k != "params"}, "params": [0]}]}
    with pytest.raises(ValueError, match=r"parameter 0: exp_avg of shape \(3, 2\), this run's is \(2, 3\)"):
        continue_optimizer(opt, state)


def test_smollm2_trains_one_step(tmp_path):
    """The embedded SmolLM2-135M through one full training step (rollouts, update, checkpoint, eval)."""
    out = tmp_path / "smol"
    cfg = load_config(overrides=[
        "train.steps=1", "train.tasks_per_step=1", "algo.group_size=2", "eval.episodes=2", "env.max_turns=2",
        "train.warm_start_steps=1",
        "train.progress=false", f"train.out_dir={out}",
    ])
    final = Trainer(cfg).train()
    m = metrics(out)
    assert [x["step"] for x in m] == [0, 1]
    # 4 sampled turns are too few to promise a valid move (~20% of this untrained policy's moves are valid): the
    # earlier "> 0" held for the old shared sampling stream only, not for per-episode seeds
    assert math.isfinite(m[1]["loss/policy"]) and 0.0 <= m[1]["valid/rate"] <= 1.0
    assert 0.0 <= final["eval/success"] <= 1.0
    assert (out / "checkpoints" / "step-1" / "adapter" / "adapter_config.json").is_file()


def test_expert_episodes_are_laid_out_like_the_models_own():
    """Warm-start episodes use the same prompts as rollouts: each prompt extends the previous prompt + reply, the
    reply is the expert's move + the end-of-turn id, and the expert solves the task."""
    from selfevolve.envs import FrozenLakeEnv, make_env
    from selfevolve.tasks.source import SeedTasks
    from selfevolve.train.warm_start import expert_episodes

    cfg = load_config(overrides=["model.name=tiny"])
    policy = build_policy(cfg)
    builder = build_prompt(cfg, policy, make_env(FrozenLakeEnv))
    tok = policy.tokenizer
    trajs = expert_episodes(FrozenLakeEnv, {}, SeedTasks("frozenlake").next(5), builder, tok)
    for t in trajs:
        assert t.success
        for prev, nxt in zip(t.steps, t.steps[1:]):
            assert nxt.prompt_ids[: len(prev.prompt_ids) + len(prev.action_ids)] == prev.prompt_ids + prev.action_ids
        for s in t.steps:
            assert s.action_ids == tok.encode(s.action_text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]


def test_warm_start_lowers_the_imitation_loss(tmp_path):
    out = tmp_path / "warm"
    Trainer(load_config(overrides=FAST + ["train.steps=0", "train.warm_start_steps=4", "algo.lr=3e-3",
                                          "eval.after_warm_start=true", f"train.out_dir={out}"])).train()
    first = metrics(out)[0]
    assert first["warm/steps"] == 4 and first["warm/loss_bc_last"] < first["warm/loss_bc_first"]
    assert "warm/success" in first  # evaluated again after the warm start, when asked to


def test_warm_start_takes_its_own_task_count_and_can_skip_its_evaluation(tmp_path):
    out = tmp_path / "warm"
    trainer = Trainer(load_config(overrides=FAST + [
        "train.steps=0", "train.warm_start_steps=2", "train.warm_start_tasks=3", "eval.after_warm_start=false",
        f"train.out_dir={out}"]))
    trainer.train()
    assert trainer.tasks.cursor == 2 * 3  # 3 expert episodes a step, not tasks_per_step x group_size = 8
    first = metrics(out)[0]
    assert first["warm/steps"] == 2 and "eval/success" in first  # the evaluation at the start still runs
    assert not any(k.startswith("warm/") and k.removeprefix("warm/") in ("success", "reward") for k in first)


@pytest.mark.parametrize("minibatches, steps", [(1, 2), (3, 6)])
def test_warm_start_takes_minibatches_optimizer_steps_a_step(tmp_path, minibatches, steps):
    """``train.warm_start_minibatches``: each warm-start step splits its expert episodes and steps the optimizer
    once per part (2 steps x 3 parts = 6 Adam steps), while RL's ``algo.minibatches`` stays 1."""
    trainer = Trainer(load_config(overrides=FAST + [
        "train.steps=0", "train.warm_start_steps=2", "train.warm_start_tasks=3", "eval.after_warm_start=false",
        "eval.at_start=false", f"train.warm_start_minibatches={minibatches}", f"train.out_dir={tmp_path}"]))
    trainer.train()
    counts = {int(s["step"]) for s in trainer.optimizer.state.values()}
    assert counts == {steps} and trainer.cfg.algo.minibatches == 1


def test_warm_start_lr_sets_the_cloning_rate_and_rl_keeps_algo_lr(tmp_path, monkeypatch):
    """``train.warm_start_lr``: the cloning's optimizer steps run at it; afterwards (RL, the checkpoint) the
    optimizer is back at ``algo.lr``."""
    import selfevolve.train.warm_start as ws

    trainer = Trainer(load_config(overrides=FAST + [
        "train.steps=1", "train.warm_start_steps=2", "train.warm_start_tasks=2", "eval.after_warm_start=false",
        "eval.at_start=false", "algo.lr=1e-4", "train.warm_start_lr=3e-4", f"train.out_dir={tmp_path}"]))
    seen = {"bc": [], "rl": []}

    def spy(kind, real):
        def call(*args, **kwargs):
            seen[kind].append({g["lr"] for g in trainer.optimizer.param_groups})
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(ws, "ppo_update", spy("bc", ws.ppo_update))
    monkeypatch.setattr(trainer.objective, "update", spy("rl", trainer.objective.update))
    trainer.train()
    assert seen["rl"]  # the RL step ran
    assert seen["bc"] == [{3e-4}, {3e-4}] and all(s == {1e-4} for s in seen["rl"])
    assert {g["lr"] for g in trainer.optimizer.param_groups} == {1e-4}
    for step in ("step-0", "step-1"):  # the checkpoint written after the warm start, and the one after RL
        meta = safe_open(str(tmp_path / "checkpoints" / step / "optimizer.safetensors"), "pt").metadata()
        assert {g["lr"] for g in json.loads(meta["selfevolve.optimizer"])["param_groups"]} == {1e-4}


def test_learning_rate_block_puts_the_rates_back_after_an_error():
    from selfevolve.train.warm_start import learning_rate

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-4)
    with pytest.raises(RuntimeError), learning_rate(opt, 5e-4):
        assert opt.param_groups[0]["lr"] == 5e-4
        raise RuntimeError("a failed cloning step")
    assert opt.param_groups[0]["lr"] == 1e-4


def test_lora_on_the_top_layers_only_trains_those_and_the_backward_stops_below_them():
    from selfevolve.models.policy import Policy
    from selfevolve.models.loading import load_model

    model, tok = load_model("tiny", "fp32")  # 2 layers
    policy = Policy(model, tok, lora=load_config(overrides=["model.lora.top_layers=1"]).model.lora)
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    # q, k, v, o of layer 1, an A and a B matrix each; nothing in layer 0
    assert len(names) == 8 and all(".layers.1." in n for n in names)
    layer0 = policy.model.get_base_model().model.layers[0]
    seen = []
    layer0.register_forward_hook(lambda mod, args, out: seen.append(out[0] if isinstance(out, tuple) else out))
    ids = torch.tensor([[5, 6, 7, 8]])
    logp, _ = policy.action_logprobs(ids, torch.ones_like(ids), torch.tensor([[0, 0, 1, 1]]))
    logp.sum().backward()
    assert not seen[0].requires_grad  # no graph below the adapted layer: the backward has nothing to do there
    with pytest.raises(ConfigError, match="top_layers=3, but the model has 2 layers"):
        Policy(load_model("tiny", "fp32")[0], tok, lora=load_config(overrides=["model.lora.top_layers=3"]).model.lora)


def test_evaluation_reports_pass_at_k_without_touching_the_training_stream(tmp_path):
    trainer = Trainer(load_config(overrides=FAST + ["train.steps=0", f"train.out_dir={tmp_path / 'ev'}"]))
    state = trainer.generator.get_state()
    res = trainer.evaluate(episodes=3, pass_k=2)
    assert set(res) >= {"eval/success", "eval/reward", "eval/valid", "eval/pass@2"}
    assert 0.0 <= res["eval/pass@2"] <= 1.0
    assert torch.equal(state, trainer.generator.get_state())  # eval sampling has its own generator


def test_sokoban_trains_end_to_end_with_its_expert_warm_start(tmp_path):
    out = tmp_path / "sokoban"
    cfg = load_config(overrides=[x for x in FAST if not x.startswith("train.warm_start_steps")] + [
        "env.name=sokoban", "env.max_turns=3", "train.steps=1", "train.warm_start_steps=1", f"train.out_dir={out}",
    ])
    Trainer(cfg).train()
    first, last = metrics(out)
    assert first["warm/steps"] == 1 and math.isfinite(first["warm/loss_bc_first"])
    assert last["step"] == 1 and math.isfinite(last["loss/policy"])


def test_a_run_on_a_user_env_records_its_name_and_evaluates_with_the_class(tmp_path):
    from selfevolve.errors import SelfEvolveError
    from selfevolve.train.run import evaluate_checkpoint

    out = tmp_path / "user"
    MagicWord.target = "x"
    Trainer(load_config(overrides=FAST + ["train.steps=1", f"train.out_dir={out}"]), env=MagicWord).train()
    assert "name: magic" in (out / "config.yaml").read_text()
    with pytest.raises(SelfEvolveError, match="unknown env 'magic'"):
        evaluate_checkpoint(out, ["eval.episodes=2"])  # the CLI cannot rebuild a class it has never seen
    res = evaluate_checkpoint(out, ["eval.episodes=2"], env=MagicWord)
    assert res["checkpoint_step"] == 1 and 0.0 <= res["eval/success"] <= 1.0
