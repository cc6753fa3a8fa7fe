"""The README works as written: its Python snippets run, its two commands are the ones CI runs, its
links resolve and its performance summary quotes benchmarks/README.md. No file of the repository
speaks of how it was made (work sessions, issue numbers, abandoned experiments)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text()
SNIPPETS = re.findall(r"```python\n(.*?)```", TEXT, flags=re.DOTALL)
SHELL = re.findall(r"```sh\n(.*?)```", TEXT, flags=re.DOTALL)
CI = (ROOT / ".ci" / "run").read_text()
DEMO = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/tether demo"
TESTS = "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest -n auto --maxprocesses 4"


def test_readme_has_python_snippets() -> None:
    assert len(SNIPPETS) >= 4


def on_loop(snippet: str, loop: str) -> str:
    """The snippet with every ``anyio.run(main)`` of it on ``loop``: ``trio``, or ``asyncio.run``
    (a loop anyio did not start, as an application's own ``asyncio.run`` or a web server's is)."""
    if loop == "asyncio":
        return snippet
    runs = len(re.findall(r"anyio\.run\(", snippet))
    if loop == "asyncio.run":
        changed, made = re.subn(r"anyio\.run\((\w+)\)", r"__import__('asyncio').run(\1())", snippet)
    else:
        changed, made = re.subn(r"anyio\.run\((\w+)\)", rf'anyio.run(\1, backend="{loop}")', snippet)
    assert made == runs >= 1, "every anyio.run of a README snippet takes one argument"
    return changed


#: What the loop's exception handler writes when a callback or a task's error went unhandled.
UNHANDLED = ("Exception in callback", "exception was never retrieved")  # a future's or a task's


def run_snippet(snippet: str, cwd: Path) -> str:
    script = cwd / "snippet.py"
    script.write_text(snippet)
    env = {k: v for k, v in os.environ.items() if k != "TETHER_STORE"}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "the snippet printed nothing"
    assert not [text for text in UNHANDLED if text in done.stderr + done.stdout], done.stderr
    return done.stdout


@pytest.mark.parametrize("loop", ["asyncio", "trio", "asyncio.run"])
@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs(index: int, loop: str, tmp_path: Path) -> None:
    """Every example runs as written, with each ``anyio.run`` of it on trio, and under a plain
    ``asyncio.run`` (where anyio learns the backend from the running task, none in a loop's
    callback); no example leaves an error to the loop's exception handler."""
    run_snippet(on_loop(SNIPPETS[index], loop), tmp_path)


def test_the_first_snippet_prints_the_same_under_trio(tmp_path: Path) -> None:
    """The first example prints on trio exactly what it prints on asyncio."""
    outputs = []
    for loop in ("asyncio", "trio"):
        (tmp_path / loop).mkdir()
        outputs.append(run_snippet(on_loop(SNIPPETS[0], loop), tmp_path / loop))
    assert outputs[1] == outputs[0] and "completed" in outputs[1], outputs


def test_the_two_commands_are_the_readmes_shell_blocks() -> None:
    blocks = [block.strip() for block in SHELL]
    assert DEMO in blocks and TESTS in blocks, blocks


def _ci_steps() -> list[str]:
    """The commands .ci/run runs, one per line, with the quiet, cache and timing-report flags dropped."""
    steps = []
    for line in CI.splitlines():
        line = re.sub(r" -q\b| -p no:cacheprovider| --durations=\d+", "", line.strip())
        if line.startswith((".venv/", "python3 ")):
            steps.append(line)
    return steps


def test_ci_runs_the_readmes_test_command_step_by_step() -> None:
    steps = _ci_steps()
    for step in TESTS.split(" && "):
        assert step in steps, f"{step!r} is not a step of .ci/run ({steps})"
    # Then the test command's pytest is the last step, and a run that collects nothing fails.
    assert steps[-1] == TESTS.split(" && ")[-1]
    assert '"$status" -eq 5' in CI


def test_the_demo_command_is_the_console_script() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    install, command = DEMO.split(" && ")[1:]
    assert install == ".venv/bin/pip install -e ."
    name, argument = command.removeprefix(".venv/bin/").split()
    assert name in scripts and argument == "demo"


def test_relative_links_resolve() -> None:
    links = re.findall(r"\]\(([^)#]+)\)", TEXT)
    assert "docs/durability.md" in links and "benchmarks/README.md" in links
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), link


def test_the_performance_summary_quotes_the_benchmark_tables() -> None:
    """Every figure of the summary (its table and its ratios) is printed in benchmarks/README.md."""
    summary = TEXT[TEXT.index("## Performance") : TEXT.index("## License")]
    tables = (ROOT / "benchmarks" / "README.md").read_text()
    commands = re.findall(r"`([^`]*-m benchmarks\.[^`]*)`", summary)
    assert len(commands) >= 2, "the summary names no command"
    for command in commands:
        assert command in tables, command
    rows = [line for line in summary.splitlines() if line.startswith("| ") and "runs/s" not in line]
    ratios = re.findall(r"\d+\.\d\dx", summary)
    figures = [f for row in rows for f in re.findall(r"\d[\d,]*(?:\.\d\dx)?", row)] + ratios
    assert len(rows) == 4 and len(figures) > 30, (rows, figures)
    for figure in figures:
        assert re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d,]|\.\d)", tables), f"{figure} is in no table"


#: Words about how the repository was made, not about the project (built so this file does not match).
_MAKING = re.compile(
    "|".join(["this " + "session", "previous " + "session", "tried and " + "reverted", "issue" + " [0-9]"]),
    re.I,
)
_SKIP = {
    ".git",
    ".venv",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "build",
    "dist",
}


def test_no_file_speaks_of_how_the_repository_was_made() -> None:
    found = []
    for directory, subdirs, files in os.walk(ROOT):
        subdirs[:] = [d for d in subdirs if d not in _SKIP and not d.endswith(".egg-info")]
        for name in files:
            path = Path(directory, name)
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # a database or another binary file
            found += [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for m in _MAKING.finditer(text)]
    assert not found, found
