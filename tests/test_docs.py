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


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to hyphens, a repeated
    heading suffixed -1, -2, ...; lines inside fenced code are not headings."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6} (.*)", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_section_links_of_the_results_page_and_the_notebook_name_headings_that_exist():
    """results.md points into benchmarks.md section by section; a renamed heading must not leave it pointing
    nowhere."""
    broken = []
    for page in (ROOT / "docs" / "results.md", ROOT / "docs" / "benchmarks.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if "#" not in target or target.startswith(("http://", "https://")):
                continue
            path, anchor = target.split("#", 1)
            linked = page if not path else page.parent / path
            if linked.suffix == ".md" and linked.exists() and anchor not in heading_anchors(linked):
                broken.append(f"{page.name} -> {target}")
    assert not broken, broken


def test_github_anchors_are_derived_as_github_derives_them(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Results\n## 2. Credit: GRPO, `RLOO` & PPO (70 %)\n```\n# not a heading\n```\n## Results\n")
    assert heading_anchors(page) == {"results", "2-credit-grpo-rloo--ppo-70-", "results-1"}
