"""The import layering of ``src/pgsurge``, checked on the source (AST walk).

Each package or module belongs to one layer and imports only from layers
below it; siblings in a layer do not import each other (``engine`` and
``report``; ``script``, ``stats`` and ``server``), except in the base
layer, whose plain modules may use each other. Function-level and
``TYPE_CHECKING`` imports count too: a lazy import is still a dependency.
Only ``pgconn`` imports ``psycopg.pq``; nothing imports ``cli`` but
``python -m pgsurge`` (``__main__``).
A new package must be given its layer here before it can be imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "pgsurge"

#: lowest first; a unit is a top-level module or package of pgsurge
LAYERS: tuple[frozenset[str], ...] = (
    frozenset(
        {
            "pgsurge",
            "config",
            "errors",
            "cnum",
            "redact",
            "deferred",
            "deferred_errors",
            "records",
            "_native",
        }
    ),
    frozenset({"pgconn", "prng"}),
    frozenset({"script", "stats", "server"}),
    frozenset({"engine", "report", "insight", "workloads"}),
    frozenset({"runner", "init", "experiment", "distributed"}),
    # the results store reads result documents with experiment's code (the
    # workload key compare uses); cli hands it a finished run's document
    frozenset({"store"}),
    frozenset({"cli"}),
    frozenset({"__main__"}),
)
#: the base layer's modules may import each other (errors, config, cnum)
SIBLINGS_ALLOWED = frozenset({0})


def layer_of(unit: str) -> int:
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"pgsurge.{unit} has no layer in tests/unit/test_layers.py")


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "pgsurge"


def module_name(path: Path, src: Path = SRC) -> str:
    rel = path.relative_to(src.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def imports(tree: ast.AST, me: str = "") -> Iterator[tuple[int, str]]:
    """(line, imported module) of every import in ``tree`` of module ``me``
    (relative imports resolved against it); for ``from pgsurge import x``
    the module is ``pgsurge.x`` when ``x`` is a submodule (a unit), else
    ``pgsurge``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                # "from .x import y" in a.b.c means a.b.x (``me`` of a
                # package's __init__ is given as a.b.__init__)
                base = me.split(".")
                base = base[: len(base) - node.level]
                module = ".".join([*base, module] if module else base)
            if not module:
                continue
            if module == "pgsurge":
                for alias in node.names:
                    name = alias.name
                    is_unit = any(name in layer for layer in LAYERS)
                    yield node.lineno, f"pgsurge.{name}" if is_unit else "pgsurge"
            else:
                for alias in node.names:
                    yield node.lineno, f"{module}.{alias.name}"


def violations(src: Path) -> list[str]:
    found = []
    for path in sorted(src.rglob("*.py")):
        me = module_name(path, src)
        my_unit = unit_of(me)
        my_layer = layer_of(my_unit)
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(src.parent)
        rel_base = f"{me}.__init__" if path.name == "__init__.py" else me
        for line, target in imports(tree, rel_base):
            if target.startswith("psycopg.pq") and my_unit != "pgconn":
                found.append(f"{where}:{line}: only pgconn imports psycopg.pq")
            if not target.startswith("pgsurge"):
                continue
            unit = unit_of(target)
            if unit == my_unit:
                continue
            layer = layer_of(unit)
            if unit == "cli" and my_unit != "__main__":
                found.append(f"{where}:{line}: imports cli (nothing may)")
            elif layer > my_layer:
                found.append(
                    f"{where}:{line}: {my_unit} (layer {my_layer}) imports "
                    f"{unit} (layer {layer}), a higher layer"
                )
            elif layer == my_layer and layer not in SIBLINGS_ALLOWED:
                found.append(
                    f"{where}:{line}: {my_unit} imports its sibling {unit} "
                    f"(layer {layer})"
                )
    return found


def test_imports_follow_the_layers() -> None:
    assert violations(SRC) == []


def test_no_import_circle_between_modules() -> None:
    """No two modules import each other, directly or through others."""
    graph: dict[str, set[str]] = {}
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    for name, path in modules.items():
        deps = set()
        rel_base = f"{name}.__init__" if path.name == "__init__.py" else name
        for _line, target in imports(ast.parse(path.read_text()), rel_base):
            # "from pgsurge.x import y": y may be a module or a name in x
            for cand in (target, target.rsplit(".", 1)[0]):
                if cand in modules and cand != name:
                    deps.add(cand)
                    break
        graph[name] = deps
    # a package's __init__ re-exporting its modules is not a circle
    for name in graph:
        graph[name] = {d for d in graph[name] if not name.startswith(d + ".")}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle.extend([*stack[stack.index(dep) :], dep])
                return True
            if dep not in state and visit(dep, [*stack, dep]):
                return True
        state[node] = 2
        return False

    for node in sorted(graph):
        if node not in state and visit(node, [node]):
            break
    assert cycle == [], " -> ".join(cycle)


@pytest.mark.parametrize(
    ("where", "code", "expected"),
    [
        ("engine/bad.py", "from pgsurge.report.text import render_text\n", "sibling"),
        ("stats/bad.py", "from pgsurge.engine import state\n", "higher layer"),
        ("report/bad.py", "def f():\n    from pgsurge.runner import run\n", "higher"),
        ("script/bad.py", "from pgsurge.stats import counters\n", "sibling"),
        ("runner_extra.py", "x = 1\n", "has no layer"),
        ("engine/bad.py", "from pgsurge.cli import main\n", "imports cli"),
        ("stats/bad.py", "from ..engine import state\n", "higher layer"),
        ("engine/bad.py", "from psycopg import pq\nimport psycopg.pq\n", "psycopg.pq"),
    ],
)
def test_the_check_catches_a_new_violation(
    tmp_path: Path, where: str, code: str, expected: str
) -> None:
    """The check fails when a violation is added (on a copy of the tree)."""
    import shutil

    copy = tmp_path / "pgsurge"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("*.so", "*.c", "*.h"))
    (copy / where).write_text(code)
    try:
        found = violations(copy)
    except AssertionError as e:  # a unit without a layer
        found = [str(e)]
    assert any(expected in v for v in found), found
