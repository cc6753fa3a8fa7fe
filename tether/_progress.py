"""A progress line on stderr for long commands (``prune``, ``migrate``, ``bench``), only on a terminal.

``prune`` and ``migrate`` are one store call each, so the line shows what is being done and for how
long, redrawn every :data:`TICK` seconds; ``bench`` also passes its benchmark's lines through
(:meth:`Progress.echo` clears the line first, so output and progress never share a line). When
stderr is not a terminal (a pipe, a log, a test) nothing is drawn.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Final, Self, TextIO

import anyio
import anyio.abc

__all__ = ["TICK", "Progress"]

#: Seconds between two redraws.
TICK: Final = 0.1
_FRAMES: Final = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_BAR: Final = 20


class Progress:
    """``async with Progress("pruning rows older than 7d"):`` draws ``⠹ pruning ... 3.2 s [====   ]``."""

    def __init__(self, label: str, *, stream: TextIO | None = None) -> None:
        self.label = label
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = self._stream.isatty()
        self._started = time.monotonic()
        self._frame = 0
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        self._started = time.monotonic()
        if self.enabled:
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
            self._group.start_soon(self._tick)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        group, self._group = self._group, None
        if group is None:
            return None
        group.cancel_scope.cancel()
        try:
            return await group.__aexit__(exc_type, exc, tb)
        finally:
            self._clear()
            self._stream.write(f"{self.label}: done in {self.elapsed:.1f} s\n")
            self._stream.flush()

    @property
    def elapsed(self) -> float:
        """Seconds since the work started."""
        return time.monotonic() - self._started

    def echo(self, line: str) -> None:
        """Print ``line`` on stdout without mixing it with the progress line."""
        self._clear()
        print(line, flush=True)
        self._draw()

    async def _tick(self) -> None:
        while True:
            self._draw()
            await anyio.sleep(TICK)

    def _draw(self) -> None:
        if not self.enabled:
            return
        self._frame = (self._frame + 1) % len(_FRAMES)
        # An indeterminate bar: a block sweeping back and forth, one step per redraw.
        step = self._frame_count() % (2 * (_BAR - 4))
        at = step if step < _BAR - 4 else 2 * (_BAR - 4) - step
        bar = " " * at + "====" + " " * (_BAR - 4 - at)
        self._stream.write(f"\r{_FRAMES[self._frame]} {self.label} {self.elapsed:5.1f} s [{bar}]")
        self._stream.flush()

    def _frame_count(self) -> int:
        return int(self.elapsed / TICK)

    def _clear(self) -> None:
        if self.enabled:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
