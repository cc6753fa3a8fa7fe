"""The public face of the four import packages and the shape of their imports.

Each package's ``__init__`` is its public face: an explicit, sorted ``__all__`` whose names exist, and
public classes that name that face in ``__module__``. Imports run one way (stores <- actors <-
replication <- tether), cross a package boundary only into a public module, never go round in a
circle at import time, and ``actors._core`` never reaches the durable half. Every package ships
``py.typed`` and the wheel and mypy cover all four.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import msgspec
import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = [
    "stores",
    "actors",
    "replication",
    "tether",
]  # in dependency order: each may import only those before it
PACKAGES = ["stores", "actors", "actors.models", "actors.events", "actors.mcp", "replication", "tether"]

CONTRACT = {
    "actors": [
        "ActorSystem",
        "Actor",
        "ActorRef",
        "Agent",
        "tool",
        "interrupt",
        "Resume",
        "idempotent",
        "current_run",
        "RunRef",
        "RunResult",
        "Recover",
        "Cancel",
        "MailboxFull",
        "AskTimeout",
        "ActorCrashed",
        "ActorStopped",
        "TetherError",
        "AlreadyResumed",
        "CheckpointError",
        "RunNotFound",
        "RunExists",
        "WriteConflict",
        "SerializationError",
        "IdempotencyError",
        "RunnerNotFound",
        "ToolNotFound",
        "ResumeRequired",
        "MaxTurnsExceeded",
    ],
    "actors.models": ["FunctionModel", "ModelReply", "ToolCall", "Message", "OpenAIChat"],
    "actors.mcp": ["MCPServer"],
    "stores": ["SQLiteStore", "PostgresStore", "Checkpoint", "PendingInterrupt", "open_store"],
}


def _isort_key(name: str) -> tuple[int, str]:
    """ruff's ``__all__`` order: CONSTANTS, then Classes, then functions, each alphabetical."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_explicit_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert isinstance(exported, list)
    assert exported == sorted(exported, key=_isort_key), f"{name}.__all__ is not sorted"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    for public in exported:
        assert hasattr(module, public), f"{name}.__all__ names {public!r}, which does not exist"
    for public in [n for n in vars(module) if not n.startswith("_")]:
        obj = getattr(module, public)
        if getattr(obj, "__module__", "").startswith(name.split(".")[0]) and not isinstance(
            obj, type(module)
        ):
            assert public in exported, f"{name}.{public} is public but not in __all__"


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_contract_names_are_exported(name: str) -> None:
    module = importlib.import_module(name)
    missing = [n for n in CONTRACT[name] if n not in module.__all__]
    assert not missing, f"{name} lacks contract names {missing}"


def test_store_errors_are_the_same_objects_in_actors() -> None:
    import actors
    import stores

    for error in [
        "TetherError",
        "AlreadyResumed",
        "CheckpointError",
        "RunNotFound",
        "RunExists",
        "WriteConflict",
        "SerializationError",
        "IdempotencyError",
    ]:
        assert getattr(actors, error) is getattr(stores, error)
    assert issubclass(stores.RunNotFound, stores.CheckpointError)
    assert issubclass(stores.RunExists, stores.CheckpointError)
    assert issubclass(stores.WriteConflict, stores.AlreadyResumed)
    assert issubclass(stores.IdempotencyError, stores.SerializationError)
    for error in [
        "MailboxFull",
        "AskTimeout",
        "ActorCrashed",
        "ActorStopped",
        "RunnerNotFound",
        "ToolNotFound",
        "ResumeRequired",
        "MaxTurnsExceeded",
    ]:
        assert issubclass(getattr(actors, error), stores.TetherError)


# -- __module__ ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PACKAGES)
def test_public_classes_name_their_public_face(name: str) -> None:
    """``actors.AlreadyResumed``, not ``stores._errors.AlreadyResumed``: tracebacks name the public face."""
    module = importlib.import_module(name)
    for public in module.__all__:
        obj = getattr(module, public)
        if not inspect.isclass(obj):
            continue
        owner = obj.__module__
        if owner != name:
            # A re-export from another public face (actors re-exports stores' errors): it is that face's.
            assert owner in PACKAGES, f"{name}.{public}.__module__ is {owner!r}"
            assert getattr(importlib.import_module(owner), public, None) is obj, f"{name}.{public}"
        if issubclass(obj, msgspec.Struct):
            # msgspec resolves annotations in the module ``__module__`` names: a decoder must still build.
            msgspec.json.Decoder(obj)


def test_one_helper_rewrites_module_metadata() -> None:
    """Every package's face rewrites ``__module__`` through ``stores.fixup_module_metadata``."""
    writers = sorted(
        str(path.relative_to(ROOT)) for path in MODULES.values() if "__module__ =" in path.read_text()
    )
    assert writers == ["stores/_meta.py"], writers


# -- the import graph ------------------------------------------------------------------------------


def _modules() -> dict[str, Path]:
    """Every module of the four packages, by dotted name."""
    found: dict[str, Path] = {}
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(body: list[ast.stmt], *, import_time: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``body``. With ``import_time``, only those that run when the module is
    imported: not inside a function, not under ``if TYPE_CHECKING:``; without it, every one."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if not import_time:
                found += _import_nodes(node.body, import_time=False)
        elif isinstance(node, ast.If) and import_time and _is_type_checking(node.test):
            found += _import_nodes(node.orelse, import_time=True)
        else:  # class bodies, if/try/with/for/match blocks: their statements run at import time
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    found += _import_nodes([child], import_time=import_time)
                elif isinstance(child, ast.ExceptHandler | ast.match_case):
                    found += _import_nodes(child.body, import_time=import_time)
    return found


def _targets(module: str, *, import_time: bool) -> set[str]:
    """The modules ``module`` imports (absolute names; ``from pkg import sub`` is the submodule ``sub``)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text()).body, import_time=import_time):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            targets.add(sub if sub in MODULES else base)
    return targets


def _top(module: str) -> str:
    return module.split(".")[0]


def _ours(targets: set[str]) -> set[str]:
    return {t for t in targets if _top(t) in TOP}


def test_the_import_graph_covers_every_package() -> None:
    for top in TOP:
        assert top in MODULES, f"{top} has no __init__.py"
    assert len(MODULES) > len(TOP)
    # The walk itself: a known edge of each kind is found.
    assert "stores" in _targets("actors", import_time=True)
    assert "tether._commands.demo" in _targets("tether._commands", import_time=True)


def test_no_module_imports_another_in_a_circle() -> None:
    """At import time (``TYPE_CHECKING`` blocks and imports inside functions aside)."""
    graph = {m: _ours(_targets(m, import_time=True)) & set(MODULES) for m in MODULES}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circle = [*path[path.index(module) :], module]
            pytest.fail("import circle: " + " -> ".join(circle))
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_dependencies_run_one_way_into_public_modules() -> None:
    """stores <- actors <- replication <- tether, counting every import (in functions and
    ``TYPE_CHECKING`` blocks too); across a package boundary only public modules are imported."""
    for module in MODULES:
        mine = TOP.index(_top(module))
        for target in _ours(_targets(module, import_time=False)):
            theirs = TOP.index(_top(target))
            assert theirs <= mine, f"{module} imports {target}: {TOP[mine]} may not depend on {TOP[theirs]}"
            if theirs != mine:
                private = [part for part in target.split(".") if part.startswith("_")]
                assert not private, f"{module} imports {target}, a private module of {TOP[theirs]}"


def test_actors_core_never_imports_the_durable_half() -> None:
    core = [m for m in MODULES if m == "actors._core" or m.startswith("actors._core.")]
    assert core, "actors._core is missing"
    for module in core:
        for target in _ours(_targets(module, import_time=False)):
            if _top(target) == "actors":
                assert target.startswith("actors._core"), f"{module} imports {target}"


# -- what ships ------------------------------------------------------------------------------------


@pytest.mark.parametrize("top", TOP)
def test_every_package_ships_py_typed(top: str) -> None:
    assert (ROOT / top / "py.typed").is_file()


def test_the_wheel_mypy_and_the_console_script_cover_the_four_packages() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert sorted(project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]) == sorted(TOP)
    assert sorted(project["tool"]["mypy"]["packages"]) == sorted(TOP)
    assert project["project"]["scripts"] == {"tether": "tether.cli:main"}
    (script,) = entry_points(group="console_scripts", name="tether")
    from tether.cli import main

    assert script.load() is main
    assert project["project"]["license"] == "MIT" and (ROOT / "LICENSE").is_file()


#: A module holds one job; past this many lines it is doing several.
MAX_LINES = 650


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines (at most {MAX_LINES}: split it by job)"
