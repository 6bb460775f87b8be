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


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every ``selfevolve ...`` command line in a bash block of the README and the docs, as (page, words):
    continuation lines joined, comments dropped."""
    import shlex

    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", page.read_text(), flags=re.S):
            text = re.sub(r"\\\n\s*", " ", block)
            for line in text.splitlines():
                line = line.strip().removeprefix("$ ")
                if not re.match(r"(\.venv/bin/)?selfevolve\s", line):
                    continue
                words = shlex.split(line, comments=True)
                for i, w in enumerate(words):  # the command ends at a shell operator
                    if w in ("&", "&&", "|", "||", ";", ">", "2>&1") or w.startswith((">", "2>")):
                        words = words[:i]
                        break
                found.append((str(page.relative_to(ROOT)), words[1:]))
    return found


def test_every_command_in_the_docs_is_a_real_command_with_real_options():
    """The README and the docs show commands a user copies: each names a command the CLI has, options it takes,
    and config keys (KEY=VALUE) that exist — checked without running them (RUN-style placeholders and files the
    page makes first are allowed)."""
    import typer.main

    from selfevolve import cli
    from selfevolve.config import load_config
    from selfevolve.errors import ConfigError
    from selfevolve.sweep import split_sweep_args

    group = typer.main.get_command(cli.app)
    commands = documented_commands()
    assert len(commands) > 30
    bad = []
    for page, words in commands:
        if not words or words[0] in ("-h", "--help"):
            continue
        name, args = words[0], words[1:]
        command = group.commands.get(name)
        if command is None:
            bad.append(f"{page}: no command {name!r}: {' '.join(words)}")
            continue
        try:
            command.make_context(name, list(args), resilient_parsing=False)
        except Exception as e:  # typer's own copy of click's UsageError (a wrong option or argument)
            if type(e).__name__ in ("UsageError", "NoSuchOption", "BadParameter", "BadOptionUsage", "MissingParameter"):
                bad.append(f"{page}: {' '.join(words)}: {e.format_message()}")
                continue
            if type(e).__name__ != "Exit":
                raise
        overrides = [a for a in args if "=" in a and not a.startswith("-")]
        if name in ("train", "explore", "sweep") and overrides:
            try:
                if name == "sweep":
                    _, overrides, _ = split_sweep_args(overrides)
                load_config(None, overrides)
            except ConfigError as e:
                bad.append(f"{page}: {' '.join(words)}: {e}")
    assert not bad, "\n".join(bad)
