"""The ``openai:MODEL`` LLM backend against a real ``selfevolve serve`` (greedy replies, the judge, a training run
judged through it), and how it fails when nobody answers: retries counted and printed, then an error naming the
URL; a silent server times out; errors a retry cannot fix are not retried."""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from served_run import NAME, greedy, serve_run
from selfevolve.agent.prompt import render_chat
from selfevolve.config import load_config
from selfevolve.config_sections import LlmApiConfig
from selfevolve.errors import ConfigError
from selfevolve.models.llm import LLM
from selfevolve.models.openai_backend import LLMBackendError, backoff_delays


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(url, reference policy)``: a run served, and the same run loaded again for the expected replies."""
    server, reference = serve_run(tmp_path_factory.mktemp("backend") / "run")
    yield server.url, reference
    server.stop()


def test_backoff_doubles_from_the_first_delay():
    assert backoff_delays(1.0, 3) == [1.0, 2.0, 4.0] and backoff_delays(0.5, 0) == []


def test_openai_backend_gets_the_served_greedy_replies(served, tmp_path):
    url, ref = served
    llm = LLM(f"openai:{NAME}", None, log_dir=tmp_path, max_new_tokens=8,
              api=LlmApiConfig(base_url=url + "/v1", retries=0))
    conversations = [[{"role": "user", "content": f"Judge attempt {k}."}] for k in range(3)]
    replies = llm.chat(conversations, purpose="judge")
    assert replies == [ref.decode(greedy(ref, render_chat(ref.tokenizer, c), 8)[0]) for c in conversations]
    rows = [json.loads(x) for x in (tmp_path / "llm_calls.jsonl").read_text().splitlines()]
    assert [r["backend"] for r in rows] == [f"openai:{NAME}"] * 3 and all(r["retries"] == 0 for r in rows)
    assert llm.retries == 0


def test_the_judge_runs_on_the_served_model_and_counts_api_retries(served, tmp_path):
    from selfevolve.rewards.judge import judge

    url, _ = served
    llm = LLM(f"openai:{NAME}", None, log_dir=tmp_path, max_new_tokens=8, api=LlmApiConfig(base_url=url + "/v1"))
    scores, stats = judge(llm, [("Where is order 7?", "get_order(id=7)", "Action: get_order(id=7)")])
    assert len(scores) == 1 and 0.0 <= scores[0] <= 1.0
    assert stats["judge/api_retries"] == 0 and stats["judge/calls"] >= 1


def test_a_training_run_judges_with_the_served_model(served, tmp_path):
    from selfevolve import Trainer

    url, _ = served
    out = tmp_path / "judged"
    Trainer(load_config(overrides=[
        "model.name=tiny", "model.dtype=fp32", "agent.max_new_tokens=4", "env.name=shop", "env.max_turns=2",
        "train.steps=1", "train.tasks_per_step=1", "algo.group_size=2", "eval.episodes=1", "train.progress=false",
        "train.warm_start_steps=0", "reward.judge_max_new_tokens=8", "reward.source=judge",
        f"reward.judge_llm=openai:{NAME}", f"llm_api.base_url={url}/v1", f"train.out_dir={out}"])).train()
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][-1]
    calls = [json.loads(x) for x in (out / "llm_calls.jsonl").read_text().splitlines()]
    assert metrics["judge/calls"] >= 2 and metrics["judge/api_retries"] == 0
    assert calls and all(c["backend"] == f"openai:{NAME}" and c["retries"] == 0 for c in calls)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_backend_counts_retries_then_fails_naming_the_url(capsys):
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    llm = LLM("openai:judge", None, api=LlmApiConfig(base_url=base, retries=2, backoff=0.01, timeout=2))
    with pytest.raises(LLMBackendError, match=rf"openai:judge at {re.escape(base)} failed after 3 tries"):
        llm.chat([[{"role": "user", "content": "x"}]], purpose="judge")
    assert llm.retries == 2
    assert capsys.readouterr().err.count("retry") == 2


def test_openai_backend_times_out_on_a_server_that_never_answers():
    with socket.socket() as silent:  # accepts connections (backlog) and never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        base = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        llm = LLM("openai:judge", None, api=LlmApiConfig(base_url=base, retries=1, backoff=0, timeout=0.5))
        start = time.monotonic()
        with pytest.raises(LLMBackendError, match="failed after 2 tries.*Timeout"):
            llm.chat([[{"role": "user", "content": "x"}]], purpose="judge")
        assert time.monotonic() - start < 10 and llm.retries == 1


def test_openai_backend_does_not_retry_what_a_retry_cannot_fix(served):
    url, _ = served
    llm = LLM("openai:no-such-model", None, api=LlmApiConfig(base_url=url + "/v1", retries=3))
    with pytest.raises(LLMBackendError, match="refused the request.*HTTP 404.*not served here"):
        llm.chat([[{"role": "user", "content": "x"}]], purpose="judge")
    assert llm.retries == 0


def test_openai_backends_are_checked_with_the_config():
    for key in ("reward.judge_llm", "attribution.llm", "experience.llm", "questioning.llm"):
        with pytest.raises(ConfigError, match=rf"{key}='openai:x' needs llm_api.base_url"):
            load_config(overrides=[f"{key}=openai:x"])
    with pytest.raises(ConfigError, match="llm_api.base_url must start with http"):
        load_config(overrides=["llm_api.base_url=localhost:8000"])
    with pytest.raises(ConfigError, match="unknown config key 'llm_api.key'; allowed here: base_url, api_key_env"):
        load_config(overrides=["llm_api.key=sk-123"])
    cfg = load_config(overrides=["reward.judge_llm=openai:x", "llm_api.base_url=http://127.0.0.1:8000/v1"])
    assert cfg.llm_api.retries == 2 and cfg.llm_api.api_key_env == "OPENAI_API_KEY"
