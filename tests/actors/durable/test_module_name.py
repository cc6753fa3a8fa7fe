"""``module_name``: the importable name of a module, also when it runs as a script.

The keys of ``@idempotent`` calls name their function's module by it, so a run started by
``python app.py`` (the module is ``__main__``) and resumed by a process that imports ``app`` find the
same entries. Each way a program can be started is set up here as the interpreter sets it.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from actors.lowlevel import module_name


def _main(monkeypatch: pytest.MonkeyPatch, *, spec_name: str | None = None, file: Path | None = None) -> None:
    main = types.ModuleType("__main__")
    main.__spec__ = None if spec_name is None else types.SimpleNamespace(name=spec_name)  # type: ignore[assignment]
    if file is not None:
        main.__file__ = str(file)
    monkeypatch.setitem(sys.modules, "__main__", main)


def test_an_imported_module_keeps_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    _main(monkeypatch, spec_name="elsewhere")
    assert module_name("shop.billing") == "shop.billing"


def test_python_dash_m_gives_the_module_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _main(monkeypatch, spec_name="shop.app", file=tmp_path / "app.py")
    assert module_name("__main__") == "shop.app"


def test_a_script_is_named_by_its_stem_and_the_packages_it_sits_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = tmp_path / "shop" / "orders"
    package.mkdir(parents=True)
    (tmp_path / "shop" / "__init__.py").touch()
    (package / "__init__.py").touch()
    _main(monkeypatch, file=package / "app.py")
    assert module_name("__main__") == "shop.orders.app"
    _main(monkeypatch, spec_name="", file=package / "app.py")  # an empty spec name is no name
    assert module_name("__main__") == "shop.orders.app"


def test_a_script_outside_a_package_is_its_stem(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "app.py").touch()
    _main(monkeypatch, file=tmp_path / "app.py")
    assert module_name("__main__") == "app"


def test_a_script_path_is_resolved_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").touch()
    (tmp_path / "shop" / "app.py").touch()
    (tmp_path / "run.py").symlink_to(tmp_path / "shop" / "app.py")
    _main(monkeypatch, file=tmp_path / "run.py")  # started through a link to the module's file
    assert module_name("__main__") == "shop.app"


def test_code_with_no_file_stays_main(monkeypatch: pytest.MonkeyPatch) -> None:
    _main(monkeypatch)  # a REPL, python -c
    assert module_name("__main__") == "__main__"
    monkeypatch.delitem(sys.modules, "__main__")
    assert module_name("__main__") == "__main__"
