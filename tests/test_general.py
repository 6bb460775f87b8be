"""What training does to the rest of the model: the fixed general questions, scored for a run and its base."""

from __future__ import annotations

from selfevolve import Trainer, load_config
from selfevolve.train.general import QUESTIONS, answered, general_knowledge

from conftest import invoke


def test_a_reply_counts_when_it_holds_an_accepted_answer():
    assert answered("The capital of France is Paris.", ("paris",))
    assert answered("A week is approximately 7 days.", ("seven", "7"))
    assert not answered("Il Coriobella, Italy.", ("rome",)) and not answered("", ("paris",))
    assert len(QUESTIONS) == 20 and len({q for q, _ in QUESTIONS}) == 20


def test_general_knowledge_is_scored_in_evaluation_and_by_the_eval_command(tmp_path):
    """The tiny random model answers none; the score is a metric of every evaluation with eval.general=true, and
    `selfevolve eval RUN --general` prints it for the run and for its base model."""
    cfg = load_config(overrides=["model.name=tiny", "env.size=3", "train.steps=0", "train.warm_start_steps=0",
                                 "eval.episodes=2", "eval.general=true", f"train.out_dir={tmp_path}",
                                 "train.progress=false"])
    trainer = Trainer(cfg)
    result = trainer.train()
    assert result["eval/general"] == 0.0
    scored = general_knowledge(trainer.policy)
    assert len(scored["replies"]) == 20 and scored["correct"] == 0.0
    code, err, output = invoke("eval", str(tmp_path), "--general")
    assert code == 0, output
    assert "eval/general: 0.0000" in output and "eval/general_base: 0.0000" in output
