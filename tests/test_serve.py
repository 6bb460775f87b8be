"""``selfevolve serve``: a real uvicorn server on a free localhost port, called with the real openai client.

Greedy replies must carry exactly the ids (and log-probs) ``Policy.generate`` gives for the same prompt, also
when concurrent requests are batched together; bad bodies get a 4xx that names the field, never a 5xx; a request
that cannot be answered in time gets a 504, not a hang. The ``openai:MODEL`` backend's tests against this server
are in test_openai_backend.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import cli_env, invoke, assert_user_error
from served_run import NAME, client, greedy, make_run, serve_run
from selfevolve.agent.prompt import render_chat
from selfevolve.serve.app import Server, ServeOptions, bind, create_app
from selfevolve.serve.protocol import Limits


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(url, reference policy, server)``: the run served, and the same run loaded again for the expected ids."""
    server, reference = serve_run(tmp_path_factory.mktemp("serve") / "run")
    yield server.url, reference, server
    server.stop()


def test_models_lists_the_served_run(served):
    url, _, _ = served
    assert [m.id for m in client(url).models.list().data] == [NAME]


def test_chat_reply_has_exactly_the_policys_greedy_ids_and_logprobs(served):
    url, ref, _ = served
    messages = [{"role": "system", "content": "You move on a frozen lake."}, {"role": "user", "content": "Go."}]
    reply = client(url).chat.completions.create(model=NAME, messages=messages, max_tokens=12, temperature=0,
                                                logprobs=True)
    prompt = render_chat(ref.tokenizer, messages)
    ids, logprobs = greedy(ref, prompt, 12)
    choice = reply.choices[0]
    assert reply.prompt_token_ids == prompt
    assert choice.token_ids == ids
    assert [t.logprob for t in choice.logprobs.content] == pytest.approx(logprobs, abs=1e-5)
    assert [t.token for t in choice.logprobs.content] == [ref.tokenizer.decode([i]) for i in ids]
    assert choice.message.content == ref.decode(ids)
    assert choice.finish_reason == ("stop" if ids[-1] in ref.stop_ids else "length")
    assert reply.usage.prompt_tokens == len(prompt) and reply.usage.completion_tokens == len(ids)


def test_completions_take_token_ids_and_texts(served):
    url, ref, _ = served
    text = "The lake is frozen and"
    reply = client(url).completions.create(model=NAME, prompt=[[1, 520, 9531, 198], text], max_tokens=6,
                                           temperature=0, n=2, logprobs=0)
    text_ids = ref.tokenizer.encode(text, add_special_tokens=False)
    assert reply.prompt_token_ids == [[1, 520, 9531, 198], text_ids]
    assert len(reply.choices) == 4 and [c.index for c in reply.choices] == [0, 1, 2, 3]
    for k, prompt in enumerate([[1, 520, 9531, 198], text_ids]):
        ids, logprobs = greedy(ref, prompt, 6)
        for c in reply.choices[2 * k:2 * k + 2]:  # n=2 greedy choices: both the greedy reply
            assert c.token_ids == ids and c.text == ref.decode(ids)
            # batched with the other prompt (left padding): the same ids, log-probs equal to float rounding
            assert c.logprobs.token_logprobs == pytest.approx(logprobs, abs=2e-4)


def test_concurrent_requests_are_batched_and_keep_exact_ids(served):
    url, ref, server = served
    prompts = [[{"role": "user", "content": f"Request {k}: go {'left ' * k}now."}] for k in range(8)]
    expected = [greedy(ref, render_chat(ref.tokenizer, m), 10)[0] for m in prompts]
    batcher = server.server.config.app.state.batcher
    before = batcher.batches
    api = client(url)

    def ask(messages):
        return api.chat.completions.create(model=NAME, messages=messages, max_tokens=10, temperature=0)

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(ask, prompts))
    assert [r.choices[0].token_ids for r in replies] == expected
    assert batcher.batches - before < 8  # some requests shared a generate call


def test_seeded_sampling_is_reproducible_and_sampled_logprobs_use_the_temperature(served):
    url, ref, _ = served
    api = client(url)
    ask = dict(model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0.7, seed=5,
               n=3, logprobs=True)
    a, b = api.chat.completions.create(**ask), api.chat.completions.create(**ask)
    assert [c.token_ids for c in a.choices] == [c.token_ids for c in b.choices]
    # the reported log-prob of a sampled token is that of the sampling distribution (logits / 0.7)
    import torch

    prompt = a.prompt_token_ids
    first = a.choices[0].token_ids[0]
    with torch.no_grad():
        logits = ref.model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    expected = torch.log_softmax(logits / 0.7, -1)[first].item()
    assert a.choices[0].logprobs.content[0].logprob == pytest.approx(expected, abs=1e-4)


def _post(url: str, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, data=body, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


CHAT = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.mark.parametrize("path,body,status,needle", [
    ("/v1/chat/completions", b"{not json", 400, "not valid JSON"),
    ("/v1/chat/completions", b"[1, 2]", 400, "JSON object"),
    ("/v1/chat/completions", b"[" * 100_000, 400, "not valid JSON"),  # nesting bounded, no RecursionError
    ("/v1/chat/completions", {**CHAT, "n": 100}, 400, "n:"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 10_000}, 400, "max_tokens=10000 is above"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": -1}, 400, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "stream": True}, 400, "stream"),
    ("/v1/chat/completions", {**CHAT, "stop": ["\n"]}, 400, "stop"),
    ("/v1/chat/completions", {**CHAT, "top_p": 0.5}, 400, "top_p"),
    ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function"}]}, 400, "tools"),
    ("/v1/chat/completions", {**CHAT, "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "only text parts"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "word " * 2000}]}, 400,
     "at most 1,024"),
    ("/v1/chat/completions", {**CHAT, "model": "gpt-4"}, 404, "not served here; available: tiny-run"),
    ("/v1/chat/completions", {**CHAT, "temperature": 9}, 400, "temperature"),
    ("/v1/completions", {"model": NAME, "prompt": [[1, 2, -4]]}, 400, "outside the vocabulary"),
    ("/v1/completions", {"model": NAME, "prompt": [1.5, 2]}, 400, "prompt"),
    ("/v1/completions", {"model": NAME, "prompt": ""}, 400, "empty"),
    ("/v1/completions", {"model": NAME, "prompt": ["a"] * 17}, 400, "at most 16"),
    ("/v1/completions", {"model": NAME, "prompt": "a", "echo": True}, 400, "echo"),
    ("/v1/completions", {"model": NAME, "prompt": "a", "n": 8, "max_tokens": 2} | {"prompt": ["a"] * 5}, 400,
     "at most 32"),
])
def test_bad_requests_get_a_4xx_that_names_the_problem(served, path, body, status, needle):
    url, _, _ = served
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    code, answer = _post(url, path, raw)
    assert code == status, answer
    assert needle in answer["error"]["message"], answer


def test_an_oversized_body_is_refused_before_it_is_read(served):
    import http.client
    from urllib.parse import urlsplit

    url, _, _ = served
    # only the headers are sent: the server answers from the declared length, without reading a byte of body
    # (sending the body too would race the server's early answer and closed connection)
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.putrequest("POST", "/v1/chat/completions")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", "1000001")
        conn.endheaders()
        response = conn.getresponse()
        code, answer = response.status, json.loads(response.read())
    finally:
        conn.close()
    assert code == 413 and "at most 1,000,000" in answer["error"]["message"]


def test_a_body_that_stops_half_way_gets_a_408_and_the_connection_is_closed(served):
    """A client that declares 100 bytes and sends 10 once held its connection for as long as it liked."""
    import socket

    _, ref, _ = served
    server = Server(create_app(ref, NAME, ServeOptions(limits=Limits(context=2048), body_timeout=0.5)),
                    bind("127.0.0.1", 0)).start()
    host, port = server.sock.getsockname()[:2]
    try:
        with socket.create_connection((host, port), timeout=30) as sock:
            start = time.monotonic()
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n" + b'{"model": "')
            answer = b""
            while chunk := sock.recv(65536):  # until the server closes the connection
                answer += chunk
            took = time.monotonic() - start
    finally:
        server.stop()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(body)["error"]["message"] == "the body did not arrive within 0.5 s"
    assert 0.5 <= took < 10, took


class _SlowPolicy:
    """A policy whose generation never finishes in time (for the request timeout)."""

    def __init__(self, policy):
        self.inner = policy

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, *args, **kwargs):
        time.sleep(1.5)
        return self.inner.generate(*args, **kwargs)


def test_a_request_without_a_reply_in_time_gets_a_504(served):
    _, ref, _ = served
    opts = ServeOptions(limits=Limits(context=2048), request_timeout=0.3)
    server = Server(create_app(_SlowPolicy(ref), NAME, opts), bind("127.0.0.1", 0)).start()
    try:
        code, answer = _post(server.url, "/v1/chat/completions", json.dumps(CHAT).encode())
    finally:
        server.stop()
    assert code == 504 and "no reply within 0.3 s" in answer["error"]["message"]


class _BrokenPolicy(_SlowPolicy):
    """A policy whose generation fails once, then works."""

    failed = False

    def generate(self, *args, **kwargs):
        if not self.failed:
            self.failed = True
            raise ValueError("boom")
        return self.inner.generate(*args, **kwargs)


def test_a_failed_generation_is_a_500_naming_it_and_the_worker_goes_on(served):
    _, ref, _ = served
    server = Server(create_app(_BrokenPolicy(ref), NAME, ServeOptions(limits=Limits(context=2048))),
                    bind("127.0.0.1", 0)).start()
    try:
        first = _post(server.url, "/v1/chat/completions", json.dumps(CHAT).encode())
        second = _post(server.url, "/v1/chat/completions", json.dumps(CHAT).encode())
    finally:
        server.stop()
    assert first[0] == 500 and first[1]["error"]["message"] == "generation failed: ValueError: boom"
    assert second[0] == 200 and second[1]["choices"][0]["token_ids"]


def test_a_full_queue_or_a_stopped_worker_refuses_at_once(served):
    from selfevolve.serve.batcher import Batcher, Busy, Work

    _, ref, _ = served
    with pytest.raises(Busy, match="worker has stopped"):
        Batcher(ref).submit(Work([[1, 2]], 1, 2, 0.0, None))  # never started
    batcher = Batcher(_SlowPolicy(ref), max_pending=1, window=0).start()
    try:
        first = batcher.submit(Work([[1, 2]], 1, 2, 0.0, None))
        while batcher.pending:  # the worker has taken the first item and is generating (1.5 s)
            time.sleep(0.01)
        batcher.submit(Work([[1, 3]], 1, 2, 0.0, None))  # waits in the queue: now full
        with pytest.raises(Busy, match=r"the queue is full \(1 requests waiting\)"):
            batcher.submit(Work([[1, 4]], 1, 2, 0.0, None))
        assert first.result(timeout=30)[0][0].ids
    finally:
        batcher.stop()


# ---- the command --------------------------------------------------------------------------------------------
def test_serve_command_serves_until_stopped(tmp_path):
    root, _ = make_run(tmp_path / "myrun")
    proc = subprocess.Popen([sys.executable, "-m", "selfevolve.cli", "serve", str(root), "--port", "0"],
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        found = re.search(r"at (http://\S+)/v1", line)
        assert found and "as model 'myrun'" in line and "checkpoint step 1" in line, (line, proc.stderr.read())
        assert [m.id for m in client(found.group(1)).models.list().data] == ["myrun"]
    finally:
        proc.terminate()
        code = proc.wait(30)
    assert code == 143  # SIGTERM: a graceful shutdown, then the exit status of every command


def test_serve_command_refuses_a_folder_without_a_checkpoint(tmp_path):
    code, err, out = invoke("serve", str(tmp_path / "nothing"))
    assert_user_error(code, err, out, "no such run or checkpoint folder")


# ---- fuzz: no body is a server error ------------------------------------------------------------------------
_FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "seed",
           "stream", "stop", "logprobs", "top_logprobs", "echo", "suffix", "best_of", "logit_bias", "tools", "user"]


def _json_values():
    from hypothesis import strategies as st

    leaves = st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False) | \
        st.text(max_size=20) | st.sampled_from([NAME, "user", "system", "text", "\ud800"])
    return st.recursive(leaves, lambda kids: st.lists(kids, max_size=4) |
                        st.dictionaries(st.sampled_from(["role", "content", "type", "text", "x"]), kids, max_size=3),
                        max_leaves=12)


def test_random_bodies_get_an_answer_or_a_4xx_never_a_5xx(served):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    url, _, _ = served
    valid = {"/v1/chat/completions": {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
             "/v1/completions": {"model": NAME, "prompt": "hi", "max_tokens": 2}}
    changes = st.dictionaries(st.sampled_from(_FIELDS), _json_values(), max_size=3)
    seen = set()

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(sorted(valid)), changes, st.booleans())
    def check(where, change, from_valid):
        # from a valid body with a few fields changed (reaches generation), or from nothing (random shapes)
        data = {**valid[where], **change} if from_valid else change
        code, answer = _post(url, where, json.dumps(data).encode())  # a lone surrogate travels escaped
        seen.add(code)
        assert code == 200 or (400 <= code < 500 and answer["error"]["message"]), (data, code, answer)

    check()
    assert 200 in seen and 400 in seen  # both sides were exercised
