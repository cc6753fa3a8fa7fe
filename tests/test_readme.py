"""The README's Python snippets run as written (in a scratch directory), and its commands exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_python_snippets() -> None:
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs(index: int, tmp_path: Path) -> None:
    script = tmp_path / f"snippet_{index}.py"
    script.write_text(SNIPPETS[index])
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "the snippet printed nothing"


def test_the_two_commands_are_in_the_readme_and_ci_runs_the_test_command() -> None:
    text = README.read_text()
    demo = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/tether demo"
    tests = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
    assert demo in text and tests in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert ".venv/bin/pip install -q -e '.[test]'" in ci
    assert ".venv/bin/python -m pytest" in ci
