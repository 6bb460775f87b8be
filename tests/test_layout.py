"""The package's imports run one way (docs/architecture.md): no module imports one that imports it back, and no
folder of ``selfevolve/`` imports one that imports it back — so every folder sits on a floor above all that it
uses, and nothing runs back up the flow. Imports are read from the source (lazy ones inside functions too)."""

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "selfevolve"
# Folders that still import each other, with the reason. Games and tool worlds share their machinery both ways
# until they live under one envs/ package (issue 40, item 4).
KNOWN = {frozenset({"envs", "worlds"})}


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
    assert [c for c in cycles(rooms) if frozenset(c) not in KNOWN] == []


def test_the_reader_of_the_imports_sees_them():
    """The checks above see what they claim to: the trainer's imports, a lazy one, a package's own."""
    edges = imports(modules())
    assert {"selfevolve.objectives", "selfevolve.distributed", "selfevolve.build"} <= edges["selfevolve.train.trainer"]
    assert "selfevolve.rewards.attribution" in edges["selfevolve.train.trainer"]  # imported inside __init__
    assert "selfevolve.objectives.token" in edges["selfevolve.objectives"]
