"""The shape of the ``actors`` package: its public face, the two halves and the rules between them.

``_core`` (the runtime) never imports ``_durable`` (durable runs); ``_durable`` never imports the
``ActorSystem`` façade; only the system and the two faces (``actors``, ``actors.lowlevel``) see
both; no module-level import cycle; every module stays small; public names report ``actors`` as
their module; ``ActorSystem``'s parameters are typed.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import actors
from actors import ActorSystem

PACKAGE = Path(actors.__file__).resolve().parent
#: Files another package is about to take over; they are not part of the runtime or the durable layer.
APPLICATION = {"_cli.py", "_demo.py"}


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of ``actors`` (dotted name, file), ``models/`` included."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in APPLICATION and path.parent == PACKAGE:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The absolute names an ``import from`` statement in ``module`` loads."""
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join(parts[:keep] + ([node.module] if node.module else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def imports(module: str, path: Path, *, runtime_only: bool) -> set[str]:
    """The ``actors`` modules ``module`` imports; with ``runtime_only``, not those inside
    ``if TYPE_CHECKING:`` nor inside functions (what runs when the module is imported)."""
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    known = {name for name, _ in modules()}
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and runtime_only and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.ImportFrom):
                found.update(n for n in resolve(module, is_package, node) if n in known)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in known)
            if runtime_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            for field in ("body", "orelse", "finalbody", "handlers"):
                child = getattr(node, field, None)
                if isinstance(child, list):
                    visit([c for c in child if isinstance(c, ast.stmt | ast.ExceptHandler)])  # type: ignore[misc]
            if isinstance(node, ast.ExceptHandler):
                visit(node.body)

    visit(tree.body)
    found.discard(module)
    return found


def test_core_never_imports_the_durable_layer() -> None:
    for name, path in modules():
        if name.startswith("actors._core"):
            offending = {
                m for m in imports(name, path, runtime_only=False) if m.startswith("actors._durable")
            }
            assert not offending, f"{name} imports {sorted(offending)}"


def test_the_durable_layer_never_imports_the_system() -> None:
    for name, path in modules():
        if name.startswith("actors._durable"):
            found = imports(name, path, runtime_only=False)
            assert "actors._system" not in found, f"{name} imports actors._system"
            assert "actors" not in found, f"{name} imports the package face"


def test_only_the_system_sees_both_halves_at_import_time() -> None:
    """The two faces see both halves too; they only re-export (``actors.lowlevel`` is the tests' seam)."""
    both = []
    for name, path in modules():
        if name.startswith(("actors._core", "actors._durable")):
            continue
        found = imports(name, path, runtime_only=True)
        if any(m.startswith("actors._core") for m in found) and any(
            m.startswith("actors._durable") for m in found
        ):
            both.append(name)
    assert sorted(both) == ["actors", "actors._system", "actors.lowlevel"]


def test_no_import_cycle_at_module_level() -> None:
    graph = {name: imports(name, path, runtime_only=True) for name, path in modules()}
    # A package's __init__ runs before its modules: importing ``actors._core._x`` imports ``actors._core``.
    for name in graph:
        parent = name.rpartition(".")[0]
        while parent and parent in graph and parent != "actors":
            graph[name].add(parent)
            parent = parent.rpartition(".")[0]
    state: dict[str, int] = {}

    def walk(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if nxt == node or node.startswith(nxt + "."):
                continue  # a module of a package sees its package, which is already importing
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*trail, node, nxt]))
            if nxt not in state:
                walk(nxt, [*trail, node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [])


def test_every_module_imports_on_its_own() -> None:
    names = [name for name, _ in modules()]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m == 'actors' or m.startswith('actors.')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
        "print('ok')\n"
    )
    assert printed_by(code) == "ok"


def test_the_http_client_is_imported_by_the_first_model_call_not_by_the_packages() -> None:
    """httpx and the ``email`` package (with what they pull in) would be about a fifth of the
    objects every process of the project keeps for the garbage collector to walk, and a good part
    of its start-up."""
    code = (
        "import sys, actors, actors.models, stores, tether.cli\n"
        "from actors.models import OpenAIChat\n"
        "OpenAIChat('m', base_url='http://127.0.0.1:9/v1', api_key='k')\n"
        "print(sorted({'httpx', 'email'} & set(sys.modules)))\n"
    )
    assert printed_by(code) == "[]"


def printed_by(code: str) -> str:
    """What ``code`` prints in a fresh interpreter, which must succeed."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def test_modules_stay_small() -> None:
    for name, path in modules():
        lines = len(path.read_text().splitlines())
        assert lines < 600, f"{name} has {lines} lines"


def test_the_package_ships_py_typed() -> None:
    assert (PACKAGE / "py.typed").is_file()


def test_public_names_report_the_public_module() -> None:
    for face in (actors, actors.models):
        for name in face.__all__:
            obj = getattr(face, name)
            assert obj.__module__ == face.__name__, f"{face.__name__}.{name}.__module__ is {obj.__module__!r}"
    assert actors.AlreadyResumed.__module__ == "actors"
    assert f"{actors.Agent.__module__}.{actors.Agent.__qualname__}" == "actors.Agent"


def test_actor_system_parameters_are_typed() -> None:
    params = inspect.signature(ActorSystem.__init__).parameters
    annotations = {name: str(p.annotation) for name, p in params.items() if name != "self"}
    for name, annotation in annotations.items():
        assert annotation != str(inspect.Parameter.empty), f"ActorSystem({name}) has no annotation"
        assert "Any" not in annotation, f"ActorSystem({name}) is typed {annotation}"
    assert annotations["store"] == "Store | None"
    assert annotations["runners"] == "Iterable[Runner]"
    assert actors._durable.Runner == actors.Agent | actors.Swarm | actors.Supervisor
