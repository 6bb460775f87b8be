"""The package's imports run one way (docs/architecture.md): no module imports one that imports it back, no
folder of ``selfevolve/`` imports one that imports it back, and every folder sits on its floor of the table in
docs/architecture.md, above all that it uses — so nothing runs back up the flow. Imports are read from the source
(lazy ones inside functions too)."""

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "selfevolve"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# Imports that still run back up the floors, (importer, imported), each with its reason. Issue 40 allows at most 2.
BACK_UP: set[tuple[str, str]] = set()


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a name imported from a package counts as its submodule when
    there is one, else as the package)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module or ""
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges[name].add(t)
                    break
    return edges


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def folder(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(imports(modules())) == []


def test_no_folder_imports_one_that_imports_it_back():
    rooms: dict[str, set[str]] = defaultdict(set)
    for a, targets in imports(modules()).items():
        rooms[folder(a)] |= {folder(b) for b in targets} - {folder(a)}
    assert cycles(rooms) == []


def floors() -> dict[str, int]:
    """The floors table of docs/architecture.md: folder or top-level module name -> its floor."""
    found = {}
    for floor, names in re.findall(r"^\| (\d+) \| (.*?) \|", ARCHITECTURE.read_text(), flags=re.M):
        for name in re.findall(r"`([^`]+)`", names):
            found[name.rstrip("/").removesuffix(".py")] = int(floor)
    return found


def test_every_import_runs_down_the_floors_of_the_architecture_page():
    """A folder imports only folders on floors below its own (a floor's folders do not import each other)."""
    table, edges = floors(), imports(modules())
    unplaced = {folder(m) for m in modules()} - set(table) - {"selfevolve"}  # the package's root imports lazily
    assert not unplaced, f"not on a floor of docs/architecture.md: {sorted(unplaced)}"
    up = {(a, b) for a, targets in edges.items() for b in targets
          if folder(a) != folder(b) and folder(a) != "selfevolve" and table[folder(a)] <= table[folder(b)]}
    assert up <= BACK_UP, sorted(up - BACK_UP)
    assert len(BACK_UP) <= 2


ENV_KINDS = ("games", "tools", "suites")  # under envs/: each kind of environment in its own folder


def envs_floor(module: str) -> tuple[int, str]:
    """A module of envs/ -> (its floor inside envs/, its part): the shared modules (the protocol, held-out content,
    profiles, task files, replay) 1; the games, the tool worlds, the suites 2; the registry (envs/__init__) 3;
    the pool, which makes environments through the registry, 4."""
    parts = module.split(".")[2:]
    if not parts:
        return 3, "registry"
    if parts[0] in ENV_KINDS:
        return 2, parts[0]
    return (4, "pool") if parts[0] == "pool" else (1, "shared")


def test_games_tool_worlds_and_suites_share_only_the_envs_protocol():
    """Inside envs/, the games, the tool worlds and the suites import the shared modules and never each other,
    nor the registry that names them all."""
    edges = imports(modules())
    wrong = []
    for a, targets in edges.items():
        for b in targets:
            if folder(a) == folder(b) == "envs":
                (fa, pa), (fb, pb) = envs_floor(a), envs_floor(b)
                if pa != pb and fb >= fa:
                    wrong.append((a, b))
    assert wrong == []
    kinds = {envs_floor(m)[1] for m in modules() if folder(m) == "envs"}
    assert kinds == {"shared", "registry", "pool", *ENV_KINDS}  # the check sees every part


def test_each_seed_method_has_a_module_or_folder_named_in_the_architecture_page():
    """The table "Where each seed method lives" of docs/architecture.md names, for every seed method, a module or
    folder that exists."""
    text = ARCHITECTURE.read_text()
    section = text.split("## Where each seed method lives", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): re.findall(r"`([^`]+)`", m.group(2))
            for m in re.finditer(r"^\| \*\*(.+?)\*\*.*?\| (.*?) \|", section, flags=re.M)}
    assert set(rows) == {"SELAUR", "Self-AC", "SEER", "TSR", "self-questioning", "self-navigating",
                         "self-attributing", "context templates", "evolve"}
    for method, paths in rows.items():
        assert paths, method
        for path in paths:
            assert (PACKAGE / path).exists(), f"{method}: selfevolve/{path} does not exist"


def test_the_reader_of_the_imports_sees_them():
    """The checks above see what they claim to: the trainer's imports, a lazy one, a package's own."""
    edges = imports(modules())
    assert {"selfevolve.objectives", "selfevolve.distributed", "selfevolve.build"} <= edges["selfevolve.train.trainer"]
    assert "selfevolve.rewards.attribution" in edges["selfevolve.train.trainer"]  # imported inside __init__
    assert "selfevolve.objectives.token" in edges["selfevolve.objectives"]
    assert "selfevolve.envs.task_files" in edges["selfevolve.envs.games.game_tasks"]
    assert floors()["envs"] == 4 and floors()["__main__"] == max(floors().values())  # the table is read
