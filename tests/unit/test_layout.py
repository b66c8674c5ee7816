"""The package's shape (STYLE §1): laid out by role, no import cycles, no oversized module.

These hold the layout in place as features land: a new module at the top, an import that points
back up, or a module that grows past what one reader can hold fails here first.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sqsjobs"
#: The roles below the model (STYLE §1); a new folder is a new role and belongs in STYLE first.
ROLES = {
    "store",
    "transport",
    "runtime",
    "schedules",
    "ops",
    "cli",
    "deploy",
    "local",
    "observability",
    "api",
    "workflows",
}
MAX_TOP_LEVEL_MODULES = 16
MAX_MODULE_LINES = 600


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every sqsjobs module ``name`` imports, TYPE_CHECKING and function-level imports included."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    found.add(target)
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_there_are_no_import_cycles():
    mods = modules()
    graph = {name: imports_of(name, path, set(mods)) for name, path in mods.items()}
    assert cycles(graph) == []


def test_a_cycle_would_be_found():
    # The checker itself: a two-module loop is reported.
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_the_top_level_holds_the_model_and_the_folders_hold_the_roles():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    assert folders == ROLES
    assert (PACKAGE / "py.typed").exists()


def test_no_module_is_too_long_to_read_in_one_sitting():
    lengths = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert {n: k for n, k in lengths.items() if k > MAX_MODULE_LINES} == {}


def test_the_model_does_not_depend_on_the_machinery():
    # job, retry, registry, envelope and errors import nothing from store/, transport/, runtime/ or boto3.
    mods = modules()
    for name in ("sqsjobs.job", "sqsjobs.retry", "sqsjobs.registry", "sqsjobs.envelope", "sqsjobs.errors"):
        deps = imports_of(name, mods[name], set(mods))
        assert not {d for d in deps if d.split(".")[1] in {"store", "transport", "runtime"}}, name
        assert "boto3" not in mods[name].read_text(), name
