"""The user docs hold: their code runs (the environment example trains one step on the tiny model), their links resolve."""

import re
from pathlib import Path

from selfevolve import Trainer, load_config

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_environment_example_trains(tmp_path):
    scope: dict = {}
    exec(next(b for b in python_blocks(ROOT / "docs" / "environments.md") if "class GuessNumber" in b), scope)
    cfg = load_config(overrides=["model.name=tiny", "train.steps=1", "train.tasks_per_step=1", "algo.group_size=2",
                                 "eval.episodes=2", "train.progress=false", f"train.out_dir={tmp_path / 'g'}"])
    final = Trainer(cfg, env=scope["GuessNumber"]).train()
    assert "eval/success" in final and (tmp_path / "g" / "checkpoints" / "step-1").is_dir()


def test_readme_example_trains(tmp_path):
    block = next(b for b in python_blocks(ROOT / "README.md") if "class Guess" in b)
    assert 'overrides=["train.steps=20", "train.out_dir=runs/guess"]' in block  # what the user runs
    block = block.replace('overrides=["train.steps=20", "train.out_dir=runs/guess"]',
                          f'overrides=["model.name=tiny", "train.steps=1", "algo.group_size=2", '
                          f'"train.tasks_per_step=1", "eval.episodes=2", "train.progress=false", '
                          f'"train.out_dir={tmp_path / "r"}"]')
    exec(block, {})
    assert (tmp_path / "r" / "metrics.jsonl").is_file()


def test_relative_links_in_the_docs_point_to_files_that_exist():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken
