"""AgentEvolver's LLM-judge outcome reward (self-questioning, ``shared/design/methods.md`` §7).

For tasks without a programmatic verifier (synthesized ones), an LLM scores each attempt from 0 to 100 by
stated principles: a **relevance gate** (an attempt that does not address the task scores 0), a **repetition
gate** (one looping on the same action without progress scores at most 20), **goal achievement** judged
against the reference solution (an equivalent other path counts) and **deductions** for unnecessary or wrong
steps. Scores fall in **bands**: achieved 60–100, not achieved 0–40, never 41–59 — a judge that answers in the
gap anyway is moved to the nearer band edge (:func:`to_band`). The reward is band(score)/100 in [0, 1].

The reply ends with ``<reward>N</reward>``; :func:`parse_reward` also reads a few looser forms small models
write. A reply without a score but with a verdict in words (:func:`parse_verdict`: "the goal was (not)
reached", "the attempt was not successful") is scored at the edge of its band, 60 or 0, and counted (``judge/verdict``): SmolLM2-135M judged
every FrozenLake episode that way and then looped, never writing a score. A reply with neither is malformed:
retried once (by default) in one batch, with the bad reply shown and the format asked for again (greedy
decoding would repeat a verbatim retry word for word); still malformed, it is scored 0 — "not achieved", the
rule that never rewards an unreadable judgement — and counted (``judge/fallback``). Never an exception.

:func:`agreement` compares the judge with a verifier where both exist (accuracy, confusion table, Cohen's κ).
"""

from __future__ import annotations

import re

from selfevolve.agent.transcript import history_text
from selfevolve.untrusted import too_long

JUDGE_SYSTEM = (
    "You score an agent's attempt at a task from 0 to 100. Rules, in order:\n"
    "1. If the attempt does not address the task at all, the score is 0.\n"
    "2. If it repeats the same action again and again without progress, the score is at most 20.\n"
    "3. Otherwise decide whether the goal of the task was achieved, comparing with the reference solution "
    "when one is given. A different path that reaches the same result counts as achieved.\n"
    "4. Take points off for unnecessary or wrong steps.\n"
    "A goal achieved scores 60 to 100. A goal not achieved scores 0 to 40. Never give 41 to 59.\n"
    "Write one short sentence of reason, then end with <reward>N</reward>."
)
# One worked exchange (a made-up task of no built-in world): small models copy a shown format far more
# reliably than a described one (as with navigation.EXTRACT_EXAMPLE). It also shows a deduction at work.
JUDGE_EXAMPLE = (
    {"role": "user", "content": "Task: Set an alarm for 6:30 am on weekdays.\n\nReference solution:\n"
     "set_alarm(time=06:30, days=weekdays)\n\nThe attempt:\nRequest: Set an alarm for 6:30 am on weekdays.\n"
     "Action: list_alarms()\nResult: none\nAction: set_alarm(time=06:30, days=weekdays)\nResult: alarm set\n\n"
     "Score the attempt."},
    {"role": "assistant", "content": "The alarm was set as in the reference; listing the alarms first was not "
     "needed. <reward>85</reward>"},
)
RETRY_ASK = "Answer again with only the score, written as <reward>N</reward> with N from 0 to 100."
MAX_EPISODE_CHARS = 2400  # a longer episode keeps its start and its end (where the outcome is)
FALLBACK_SCORE = 0  # the score of a reply still unreadable after the retries: "not achieved"
VERDICT_SCORES = {True: 60, False: 0}  # a verdict in words without a score: the edge of its band
ACHIEVED = 0.6  # the lower edge of the achieved band, as a reward in [0, 1]

_TAG = re.compile(r"<reward>\s*(-?\d+)\s*</reward>", re.I)
_LABELLED = re.compile(r"\b(?:reward|score)\s*[:=]\s*(-?\d+)\b", re.I)
_OUT_OF_100 = re.compile(r"(?<![\d.])(-?\d+)\s*/\s*100\b")
_LONE = re.compile(r"\s*(-?\d+)\s*\.?\s*")
# "The goal was not reached.", "the task has been completed", "The attempt was not successful": a subject, a few
# words at most, an outcome
_VERDICT = re.compile(r"\b(?:goal|task|request|objective|attempt)\b[^.!?\n]{0,40}?\b(?:was|is|has been|were)\s+"
                      r"(not\s+|never\s+)?(?:reached|achieved|completed|accomplished|met|fulfilled|solved|"
                      r"successful)\b", re.I)


def _cut(text: str) -> str:
    if len(text) <= MAX_EPISODE_CHARS:
        return text
    head = MAX_EPISODE_CHARS // 4
    return text[:head] + "\n…\n" + text[-(MAX_EPISODE_CHARS - head):]


def judge_messages(query: str, reference: str | None, episode_text: str) -> list[dict]:
    """The judge prompt of one attempt: the principles, the worked example, then the task."""
    ref = reference.strip() if reference and reference.strip() else None
    ref_part = f"Reference solution:\n{ref}" if ref else "Reference solution: none is available; judge by the " \
        "task alone."
    ask = f"Task: {query}\n\n{ref_part}\n\nThe attempt:\n{_cut(episode_text)}\n\nScore the attempt."
    return [{"role": "system", "content": JUDGE_SYSTEM}, *JUDGE_EXAMPLE, {"role": "user", "content": ask}]


def parse_reward(text: str) -> int | None:
    """The 0–100 score of a judge reply, else None. Read in order, the first form present decides:
    ``<reward>N</reward>`` (the last such tag when several), then ``reward: N`` / ``score: N`` (last one),
    then ``N/100`` (last one), then a reply that is only an integer. A number outside 0–100 is None, and so is
    a reply longer than ``MAX_ACTION_CHARS`` (a judge's budget is ~100 tokens)."""
    if too_long(text):
        return None
    for pattern in (_TAG, _LABELLED, _OUT_OF_100):
        found = pattern.findall(text)
        if found:
            return _score(found[-1])
    m = _LONE.fullmatch(text)
    return _score(m.group(1)) if m else None


def parse_verdict(text: str) -> int | None:
    """The score of a reply that states its verdict in words but gives no number: the first "the goal was
    (not) reached/achieved/completed..." decides, scored :data:`VERDICT_SCORES` (60 achieved, 0 not). None when
    the reply has no such sentence (or is too long to read)."""
    if too_long(text):
        return None
    m = _VERDICT.search(text)
    return None if m is None else VERDICT_SCORES[m.group(1) is None]


def read_score(text: str) -> tuple[int | None, bool]:
    """A reply's score: :func:`parse_reward`, else :func:`parse_verdict`; and whether the verdict decided."""
    score = parse_reward(text)
    if score is not None:
        return score, False
    verdict = parse_verdict(text)
    return verdict, verdict is not None


def _score(digits: str) -> int | None:
    """An integer text in 0–100, else None. Checked by length first: a model may write thousands of digits,
    and int() of 4,300 or more raises."""
    if len(digits.lstrip("-").lstrip("0")) > 3:
        return None
    n = int(digits)
    return n if 0 <= n <= 100 else None


def to_band(score: int) -> int:
    """The score clipped to 0–100 and moved out of the forbidden gap to the nearer band edge: 41–50 → 40
    (not achieved), 51–59 → 60 (achieved)."""
    s = max(0, min(100, int(score)))
    if 41 <= s <= 50:
        return 40
    if 51 <= s <= 59:
        return 60
    return s


def achieved(score01: float) -> bool:
    """Whether a reward in [0, 1] lies in the achieved band (≥ 0.6)."""
    return score01 >= ACHIEVED


def judge(llm, items: list[tuple[str, str | None, str]], retries: int = 1, max_new_tokens: int | None = None
          ) -> tuple[list[float], dict[str, float]]:
    """Scores in [0, 1] (band(score)/100) of ``items`` = ``(query, reference, episode_text)``, and counts:
    ``judge/calls`` (conversations sent, retries included), ``judge/malformed`` (items whose first reply was
    unreadable), ``judge/retried`` (retry conversations sent), ``judge/fallback`` (items scored by the rule),
    ``judge/verdict`` (items scored from a verdict in words, :func:`parse_verdict`),
    ``judge/mean`` and ``judge/achieved`` (share in the achieved band); with an ``openai:MODEL`` judge also
    ``judge/api_retries`` (requests retried after a timeout or server error: a flaky server shows in the curves)."""
    if not items:
        return [], {}
    retries_before = llm.retries if getattr(llm, "remote", None) is not None else None
    convs = [judge_messages(*it) for it in items]
    replies = llm.chat(convs, purpose="judge", max_new_tokens=max_new_tokens)
    read = [read_score(r) for r in replies]
    raw: list[int | None] = [score for score, _ in read]
    by_verdict = [v for _, v in read]
    malformed = sum(r is None for r in raw)
    calls, retried = len(convs), 0
    for _ in range(max(0, retries)):
        bad = [i for i, r in enumerate(raw) if r is None]
        if not bad:
            break
        # The bad reply stays in the conversation: with greedy decoding a verbatim retry would repeat it.
        again = [[*convs[i], {"role": "assistant", "content": replies[i]}, {"role": "user", "content": RETRY_ASK}]
                 for i in bad]
        for i, reply in zip(bad, llm.chat(again, purpose="judge_retry", max_new_tokens=max_new_tokens)):
            replies[i] = reply
            raw[i], by_verdict[i] = read_score(reply)
        calls, retried = calls + len(bad), retried + len(bad)
    fallback = sum(r is None for r in raw)
    scores = [to_band(FALLBACK_SCORE if r is None else r) / 100 for r in raw]
    stats = {"judge/calls": calls, "judge/malformed": malformed, "judge/retried": retried,
             "judge/fallback": fallback, "judge/verdict": sum(by_verdict), "judge/mean": sum(scores) / len(scores),
             "judge/achieved": sum(map(achieved, scores)) / len(scores)}
    if retries_before is not None:
        stats["judge/api_retries"] = llm.retries - retries_before
    return scores, stats


def game_rules(env) -> str:
    """What a judge must be told of a game besides its first observation: the environment's instructions (a
    FrozenLake board alone does not say that G is the goal and O a hole). Empty for a tool world, whose request
    (the first observation) is the whole task."""
    return "" if getattr(env, "tools", None) else str(getattr(env, "instructions", "") or "")


def judge_trajectories(llm, trajs, retries: int = 1, max_new_tokens: int | None = None, rules: str = ""
                       ) -> tuple[list[float], dict[str, float]]:
    """:func:`judge` over episodes: the request (``Trajectory.query``, the first observation the rollout recorded,
    else the task's instruction; after the game's ``rules`` when given, see :func:`game_rules`), the reference
    (``Trajectory.reference``, else the task's) and the episode as :func:`history_text` renders it."""
    items = []
    for t in trajs:
        query = t.query or t.task.instruction
        if rules:
            query = f"{rules}\nStart:\n{query}"
        reference = t.reference or t.task.reference  # the rollout records a tool world's solution
        items.append((query, reference, history_text(query, t.steps)))
    return judge(llm, items, retries=retries, max_new_tokens=max_new_tokens)


def agreement(judged: list[bool], verified: list[bool]) -> dict[str, float]:
    """Judge (prediction) against verifier (truth): accuracy, the confusion table, precision tp/(tp+fp) and
    recall tp/(tp+fn) (0.0 when the denominator is 0), and Cohen's kappa κ = (p_o − p_e)/(1 − p_e) (Cohen 1960),
    p_o the observed agreement and p_e = p_J·p_V + (1 − p_J)(1 − p_V) the chance agreement from each rater's
    share of "yes". p_e = 1 means both raters are constant: κ = 1.0 when they agree everywhere, else 0.0.
    No items: all zero."""
    if len(judged) != len(verified):
        raise ValueError(f"{len(judged)} judgements but {len(verified)} verdicts")
    n = len(judged)
    tp = sum(j and v for j, v in zip(judged, verified))
    fp = sum(j and not v for j, v in zip(judged, verified))
    fn = sum(v and not j for j, v in zip(judged, verified))
    tn = n - tp - fp - fn
    out = {"n": n, "tp": tp, "fp": fp, "fn": fn, "tn": tn, "accuracy": 0.0, "precision": 0.0, "recall": 0.0,
           "kappa": 0.0}
    if n == 0:
        return out
    p_o = (tp + tn) / n
    p_j, p_v = (tp + fp) / n, (tp + fn) / n
    p_e = p_j * p_v + (1 - p_j) * (1 - p_v)
    out.update(accuracy=p_o, precision=tp / (tp + fp) if tp + fp else 0.0, recall=tp / (tp + fn) if tp + fn else 0.0,
               kappa=(1.0 if p_o == 1.0 else 0.0) if p_e >= 1.0 else (p_o - p_e) / (1 - p_e))
    return out


def judge_outcomes(llm, trajs, source: str, retries: int = 1, max_new_tokens: int | None = None, rules: str = ""
                   ) -> dict[str, float]:
    """The trainer's judge stage (``reward.source``). Every trajectory gets its ``judge_score``. With
    ``judge`` the score *is* the outcome: every step reward is set to 0 and the last step's to the score (the
    environment's own rewards, verifier and shaping alike, are dropped). With ``both`` the environment's rewards
    are kept and only the agreement of judge and verifier is measured (``judge/accuracy``, ``judge/kappa``)."""
    scores, stats = judge_trajectories(llm, trajs, retries=retries, max_new_tokens=max_new_tokens,
                                       rules=rules)
    for t, s in zip(trajs, scores):
        t.judge_score = s
        if source == "judge" and t.steps:
            for step in t.steps:
                step.reward = 0.0
            t.steps[-1].reward = float(s)
    if trajs:
        agree = agreement([achieved(s) for s in scores], [bool(t.success) for t in trajs])
        stats.update({"judge/accuracy": agree["accuracy"], "judge/kappa": agree["kappa"]})
    return stats
