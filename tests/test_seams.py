"""White-box tests reach the packages' insides through named seams only.

A test imports a package's public names, or what the package's seam (``<package>.lowlevel``)
re-exports for tests and tooling: never one of our private modules (``stores._codec``) nor a private
name. The rule covers every file under ``tests/`` (helpers and ``conftest.py`` too), the code a
test hands to a subprocess as a string, and the benchmarks (which share their own helpers). A seam holds a docstring, explicit imports from its own
package and a sorted ``__all__`` of exactly what it imports, nothing else; every name it exports is
one some test or benchmark imports.
"""

from __future__ import annotations

import ast
import importlib
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_public_api import _isort_key

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
#: The project's own top-level packages.
OURS = sorted(path.parent.name for path in ROOT.glob("*/__init__.py"))
SEAMS = [f"{top}.lowlevel" for top in OURS if (ROOT / top / "lowlevel.py").is_file()]


def _trees(source: str) -> Iterator[ast.Module]:
    """The module's syntax tree, then those of the code its strings hold (a subprocess's script)."""
    tree = ast.parse(source)
    yield tree
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import " in node.value:
            code = textwrap.dedent(node.value)
            try:
                ast.parse(code)
            except SyntaxError:
                continue  # prose, not code
            yield from _trees(code)


def _imports(source: str) -> Iterator[tuple[int, str, str | None]]:
    """``(line, module, name)`` of every absolute import (``name`` is ``None`` for ``import module``)."""
    for tree in _trees(source):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield node.lineno, alias.name, None
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    yield node.lineno, node.module, alias.name


def _private(module: str, name: str | None) -> str | None:
    """What this import reaches that is private to one of our packages, if anything."""
    if module.split(".")[0] not in OURS:
        return None  # a third party's, or a test helper (``conftest``, ``_cli_support``)
    if any(part.startswith("_") for part in module.split(".")):
        return module
    if name is not None and name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
        return f"{module}.{name}"
    return None


def _offences(source: str, *, own: str | None = None) -> list[str]:
    """The private imports of ``source``, but those of its ``own`` package."""
    found = [
        (line, _private(module, name))
        for line, module, name in _imports(source)
        if own is None or module.split(".")[0] != own
    ]
    return [f"line {line}: {what}" for line, what in found if what is not None]


def _test_files() -> list[Path]:
    """Every file under ``tests/`` but this one, whose samples break the rule on purpose."""
    return sorted(path for path in TESTS.rglob("*.py") if path != Path(__file__).resolve())


def _benchmark_files() -> list[Path]:
    return sorted((ROOT / "benchmarks").glob("*.py"))


def test_the_rule_sees_every_way_in() -> None:
    source = textwrap.dedent(
        '''
        import stores.sqlite._schema as schema
        from actors._durable import _sweep
        from stores._codec import MessageLogs
        from stores import _private_name

        APP = """
        import actors._durable._idempotent as keys
        """

        def later():
            from replication._wire import whole_item
        '''
    )
    assert sorted(offence.split(": ")[1] for offence in _offences(source)) == [
        "actors._durable",
        "actors._durable._idempotent",
        "replication._wire",
        "stores._codec",
        "stores._private_name",
        "stores.sqlite._schema",
    ]
    allowed = textwrap.dedent(
        """
        import actors.lowlevel
        from actors.lowlevel import sweep_module
        from stores import SQLiteStore
        from stores.testing import make_row
        from tether import __version__
        from opentelemetry.util._once import Once
        from _cli_support import RUNNER
        """
    )
    assert _offences(allowed) == []
    assert {"actors", "benchmarks", "replication", "stores", "tether"} <= set(OURS)


@pytest.mark.parametrize("path", _test_files(), ids=lambda path: str(path.relative_to(TESTS)))
def test_tests_import_no_private_module_of_ours(path: Path) -> None:
    offences = _offences(path.read_text())
    assert not offences, (
        f"{path.relative_to(ROOT)} reaches inside (use the public name or the seam): {offences}"
    )


@pytest.mark.parametrize("path", _benchmark_files(), ids=lambda path: path.name)
def test_benchmarks_import_no_private_module_of_ours_but_their_own(path: Path) -> None:
    offences = _offences(path.read_text(), own="benchmarks")
    assert not offences, (
        f"{path.relative_to(ROOT)} reaches inside (use the public name or the seam): {offences}"
    )


@pytest.mark.parametrize("seam", SEAMS)
def test_a_seam_only_re_exports_its_own_package(seam: str) -> None:
    path = ROOT / Path(*seam.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text())
    docstring = ast.get_docstring(tree)
    assert docstring is not None and "no stability promise" in docstring, f"{seam} says what it promises"
    imported: list[str] = []
    exported: list[str] | None = None
    for node in tree.body[1:]:
        if isinstance(node, ast.ImportFrom):
            assert node.module is not None and not node.level, f"{seam}: absolute imports only"
            assert node.module.split(".")[0] == seam.split(".")[0], f"{seam} imports {node.module}"
            assert all(alias.name != "*" for alias in node.names), f"{seam}: explicit imports only"
            imported += [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__":
            assert exported is None, f"{seam} assigns __all__ twice"
            exported = ast.literal_eval(node.value)
            assert isinstance(exported, list), f"{seam}.__all__ is a list"
        else:
            pytest.fail(f"{seam} line {node.lineno}: a seam holds imports and __all__, nothing else")
    assert exported is not None, f"{seam} has no __all__"
    assert exported == sorted(exported, key=_isort_key), f"{seam}.__all__ is not sorted"
    assert sorted(exported) == sorted(set(imported)), f"{seam}.__all__ is not what it imports"
    module = importlib.import_module(seam)
    assert all(hasattr(module, name) for name in exported)


@pytest.mark.parametrize("seam", SEAMS)
def test_every_name_a_seam_exports_is_used_by_a_test_or_a_benchmark(seam: str) -> None:
    used = {
        name
        for path in _test_files() + _benchmark_files()
        for _, module, name in _imports(path.read_text())
        if module == seam and name is not None
    }
    unused = sorted(set(importlib.import_module(seam).__all__) - used)
    assert not unused, f"{seam} exports names no test or benchmark imports: {unused}"
