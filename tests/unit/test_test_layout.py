"""The test suite's own layout rule, checked on the source (AST walk).

tests/README.md: a test module imports helpers from the plugins
(``tests/fix_*.py``, registered in ``conftest.py``), never from another
test module; a helper two modules need goes into a plugin. Importing a
test module also collects its tests a second time under another name
and ties one module's helpers to the other's. Absolute, relative and
function-level imports all count; plugins may not import test modules
either.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    return ".".join(rel.parts).removesuffix(".__init__")


def imported(tree: ast.AST, me: str, package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every module or name imported in ``tree``, the
    module ``me`` (``package``: an ``__init__``); relative imports resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                # "from .x import y" in a.b.c means a.b.x; in a.b's
                # __init__ it means a.b.x as well
                base = me.split(".") if package else me.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            yield node.lineno, module
            # "from tests.unit import test_x" imports the module test_x
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def violations(root: Path) -> list[str]:
    """Where a module under ``root`` (the ``tests`` package) imports a
    test module (one named ``test_*``) other than itself."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "data" in path.relative_to(root).parts:
            continue
        me = module_name(path, root)
        tree = ast.parse(path.read_text(), str(path))
        for line, name in imported(tree, me, path.name == "__init__.py"):
            parts = name.split(".")
            if parts[0] != root.name:
                continue
            for i, part in enumerate(parts):
                target = ".".join(parts[: i + 1])
                if part.startswith("test_") and target != me:
                    found.append(
                        f"{path.relative_to(root.parent)}:{line}: imports the "
                        f"test module {target} (move the helper to a plugin)"
                    )
                    break
    return sorted(set(found))


def test_no_test_module_imports_another() -> None:
    assert violations(TESTS) == []


@pytest.mark.parametrize(
    ("where", "code", "culprit"),
    [
        (
            "server/test_bad.py",
            "from tests.server.test_fastloop import _report\n",
            "tests.server.test_fastloop",
        ),
        (
            "unit/test_bad.py",
            "from .test_report_json import check\n",
            "unit.test_report_json",
        ),
        ("unit/test_bad.py", "from . import test_stats\n", "tests.unit.test_stats"),
        (
            "unit/test_bad.py",
            "from ..server.test_run import run_inprocess\n",
            "tests.server.test_run",
        ),
        (
            "unit/test_bad.py",
            "def helper():\n    from tests.unit import test_layers\n",
            "tests.unit.test_layers",
        ),
        (
            "server/test_bad.py",
            "import tests.unit.test_workloads as w\n",
            "tests.unit.test_workloads",
        ),
        (
            "fix_bad.py",
            "from tests.unit.test_layers import violations\n",
            "test_layers",
        ),
    ],
)
def test_the_check_catches_a_new_violation(
    tmp_path: Path, where: str, code: str, culprit: str
) -> None:
    """The check fails when a violation is added (on a copy of the tree)."""
    copy = tmp_path / "tests"
    shutil.copytree(TESTS, copy, ignore=shutil.ignore_patterns("data", "__pycache__"))
    assert violations(copy) == []
    (copy / where).write_text(code)
    found = violations(copy)
    assert len(found) == 1, found
    assert found[0].startswith(f"tests/{where}:"), found
    assert culprit in found[0], found


def test_plugins_and_own_names_are_allowed(tmp_path: Path) -> None:
    """Imports of plugins, of pgsurge and of the module itself pass."""
    copy = tmp_path / "tests"
    (copy / "unit").mkdir(parents=True)
    (copy / "__init__.py").write_text("")
    (copy / "unit" / "__init__.py").write_text("")
    (copy / "unit" / "test_ok.py").write_text(
        "from tests.fix_run import run_pgsurge\n"
        "from tests import fix_db\n"
        "from ..fix_data import config\n"
        "from pgsurge.runner import run\n"
        "import tests.unit.test_ok\n"
    )
    assert violations(copy) == []
