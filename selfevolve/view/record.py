"""What a run records for the viewer, next to each trajectory it logs (``RUN/trajectories.jsonl``, and the
greedy episodes of every held-out evaluation in ``RUN/eval_trajectories.jsonl``).

``Trajectory.to_dict(with_ids=False)`` leaves out the token ids (prompt ids grow with every turn). The viewer
needs a readable, compact form of some of what they carried, so each logged record also gets:

- ``system``: the system prompt of the task (rules and instruction, without any experience block): the
  first message of an SFT export;
- per step ``uncertainty``: SELAUR's u_t (mean token uncertainty of the reply, ``reward.selaur`` weights),
  computed from the rollout's statistics whether or not the run shapes its rewards with it;
- per step ``stripped``: the text self-navigating removed from the training prompt (the insight block);
- with ``train.log_prompts``: per step ``prompt`` = ``{"text", "extends"}``: the prompt decoded with its
  template tokens; ``extends: true`` means the text continues the previous turn's prompt (the full-history
  chat), so only the new tail is stored and the viewer rebuilds the whole prompt by concatenation;
- with ``train.log_tokens``: per step ``tokens`` = ``{"text", "logprob", "entropy"}``: the reply's tokens as
  text pieces (``"".join(text)`` is the decoded reply, special tokens included), the sampling log-prob and
  the full-vocabulary entropy of each, rounded to ``DIGITS`` decimals.

Advantages and values are recorded where the objective computes them (``Trajectory.advantages`` and
``.values``, one per turn; a record's ``flags.advantages`` and ``flags.values``): every estimator here broadcasts a
turn's advantage to all tokens of its reply, so the per-token advantage is the turn's.

An evaluation's episode is recorded the same way, with ``"eval": {"step", "label", "seen"}``: the training
step it was taken at, which evaluation it was (``start``, ``after warm start``, ``step N``, ``end``), and
whether its task's content was trained on (``null``: not known).
"""

from __future__ import annotations

from os.path import commonprefix

EVAL_LOG = "eval_trajectories.jsonl"
DIGITS = 3  # log-probs and entropies to 0.001 nats: finer than any colour scale shows, and short in JSON
WINDOW = 4  # tokens of left context when decoding one token (see token_pieces)


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """The text of each token of ``ids``, such that the pieces join to the decoded sequence.

    Decoding ids one by one is wrong for byte-level BPE (a character split over two tokens decodes to U+FFFD
    twice) and for SentencePiece (a leading space is dropped at the start of a sequence), so a piece is the
    difference between decoding a short window with and without it. A token that may end inside a character
    (its text ends in U+FFFD) gives an empty piece and the next token carries the whole character; after
    three such tokens (no UTF-8 character is longer than four bytes) the U+FFFD is given out as it is."""
    pieces, start = [], 0  # ids[start:i] are held back: their text may be an incomplete character
    for i in range(len(ids)):
        left = max(0, start - WINDOW)
        before = tokenizer.decode(ids[left:start], skip_special_tokens=False)
        upto = tokenizer.decode(ids[left:i + 1], skip_special_tokens=False)
        if upto.endswith("\ufffd") and i + 1 < len(ids) and i - start < 3:
            pieces.append("")
            continue
        pieces.append(upto[len(commonprefix([before, upto])):])
        start = i + 1
    return pieces


def prompt_texts(tokenizer, steps) -> list[dict]:
    """Each step's prompt as text; a prompt that extends the previous step's is stored as its new tail."""
    out, prev = [], None
    for s in steps:
        p = s.prompt_ids
        if prev is not None and len(p) >= len(prev) and p[: len(prev)] == prev:
            out.append({"text": tokenizer.decode(p[len(prev):], skip_special_tokens=False), "extends": True})
        else:
            out.append({"text": tokenizer.decode(p, skip_special_tokens=False), "extends": False})
        prev = p
    return out


def stripped_text(tokenizer, step) -> str:
    """What the training prompt left out of the prompt the model saw (self-navigating's insight block): the
    middle of ``prompt_ids`` between the prefix and the suffix it shares with ``train_prompt_ids``."""
    seen, train = step.prompt_ids, step.train_prompt_ids
    if train is None or train == seen:
        return ""
    head = 0
    while head < min(len(seen), len(train)) and seen[head] == train[head]:
        head += 1
    tail = 0
    while tail < min(len(seen), len(train)) - head and seen[-1 - tail] == train[-1 - tail]:
        tail += 1
    return tokenizer.decode(seen[head: len(seen) - tail], skip_special_tokens=False)


def trajectory_records(trajs, step: int, policy, builder, cfg) -> list[dict]:
    """The lines of ``trajectories.jsonl`` for one training step: ``{"step", **to_dict(with_ids=False)}`` plus
    the viewer's fields (module docstring)."""
    from selfevolve.objectives.credit import step_uncertainty

    tok = policy.tokenizer
    uncertainty, _ = step_uncertainty(trajs, cfg.reward.selaur, policy.vocab_size)
    records = []
    for i, t in enumerate(trajs):
        rec = {"step": step, **t.to_dict(with_ids=False)}
        rec["system"] = builder.system_prompt(t.task.instruction)
        prompts = prompt_texts(tok, t.steps) if cfg.train.log_prompts else None
        for k, (s, d) in enumerate(zip(t.steps, rec["steps"])):
            d["uncertainty"] = round(float(uncertainty[i, k]), DIGITS + 1)
            stripped = stripped_text(tok, s)
            if stripped:
                d["stripped"] = stripped
            if prompts is not None:
                d["prompt"] = prompts[k]
            if cfg.train.log_tokens:
                d["tokens"] = {"text": token_pieces(tok, s.action_ids),
                               "logprob": [round(x, DIGITS) for x in s.logprobs],
                               "entropy": [round(x, DIGITS) for x in s.entropy]}
        records.append(rec)
    return records


def eval_records(trajs, step: int, label: str, policy, builder, cfg, seen=frozenset()) -> list[dict]:
    """The lines of ``eval_trajectories.jsonl`` for one evaluation: :func:`trajectory_records` of its greedy
    episodes, each with ``"eval": {"step", "label", "seen"}``; ``seen``: whether the task's content is one the run
    trained on (``seen``: the run's content digests, ``envs/holdout.py``; never on the held-out test split)."""
    records = trajectory_records(trajs, step, policy, builder, cfg)
    for rec, traj in zip(records, trajs):
        rec["eval"] = {"step": step, "label": label, "seen": bool(traj.task.content and traj.task.content in seen)}
    return records
