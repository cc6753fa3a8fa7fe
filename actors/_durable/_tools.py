"""``@tool``: a sync or async function an agent's model can call, with a JSON schema and checked arguments.

The schema comes from the signature (per-parameter types from the annotations, through msgspec's
JSON-schema generation) and the docstring (the first paragraph describes the tool; ``Args:`` /
``:param x:`` lines describe parameters). A model's arguments are converted to the parameters'
types with msgspec before the call (strictly: ``"3"`` is not an ``int``; unknown names are refused).

:meth:`Tool.invoke` never lets an ordinary exception escape: bad arguments, a raised exception, a
timeout or a result that is not JSON each become a :class:`ToolOutcome` whose ``content`` is the
error text the model reads (a raised exception is also a WARNING with its traceback on the logger
``"tether"``). Only cancellation and the pause signal of ``interrupt()`` pass through.
Sync tools run in a worker thread with the caller's context variables, so ``current_run()`` and
``interrupt()`` work inside them.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import time
import typing
from collections.abc import Awaitable, Callable
from typing import Any, overload

import anyio
import anyio.to_thread
import msgspec

from stores import SerializationError
from stores import encode_json as encode
from stores import normalize_json as normalize

from .._core import LOGGER, tether_logger
from ._context import current_context
from ._runlog import StepAbandoned, cancelled_elsewhere

__all__ = ["Tool", "ToolOutcome", "is_tool_error", "tool"]

_log = tether_logger()

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params)\s*:\s*$")
_GOOGLE_PARAM = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


#: How the content of a failed call reads after ``Tool '<name>' `` (the contents built below and the
#: engine's missing-tool note): the events reader tells a failed call by them, from the rows alone.
_ERROR_OPENINGS = ("got invalid arguments", "timed out after", "failed:", "returned a value that is not JSON")


def is_tool_error(name: str, content: str) -> bool:
    """Whether ``content``, the tool message of a call of ``name``, is one of the error contents."""
    head = f"Tool '{name}' "
    return content.startswith(head) and content[len(head) :].startswith(_ERROR_OPENINGS)


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What one tool call gave: ``content`` is what the model reads; ``value`` the JSON result
    (``ok``) or ``None``; ``error`` the kind of failure (``"arguments"``, ``"raised"``,
    ``"timeout"``, ``"result"``) or ``None``."""

    content: str
    ok: bool = True
    value: Any = None
    error: str | None = None


class Tool:
    """A function wrapped for a model: ``name``, ``description``, ``parameters`` (JSON schema), ``timeout``.

    Calling the tool object calls the function itself, unchanged. The run uses :meth:`invoke`.
    """

    __name__: str
    __qualname__: str

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"@tool needs a callable, not {type(fn).__name__}")
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        if not isinstance(tool_name, str) or not _NAME.match(tool_name):
            raise ValueError(f"tool name {tool_name!r} must be 1-64 letters, digits, '_' or '-'")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"tool {tool_name!r}: timeout must be > 0 seconds, not {timeout!r}")
        self.fn = fn
        self.name = tool_name
        self.timeout = timeout
        self.is_async = _is_async(fn)
        doc = inspect.getdoc(fn) or ""
        summary, param_docs = _parse_docstring(doc)
        self.description = description if description is not None else summary
        self._signature = inspect.signature(fn)
        self._args_type, self.parameters = _build_arguments(fn, self._signature, tool_name, param_docs)
        # (name, positional-only, default) per parameter, read once: bind_arguments runs per call.
        self._binding = [
            (p.name, p.kind is inspect.Parameter.POSITIONAL_ONLY, p.default)
            for p in self._signature.parameters.values()
        ]
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (no validation, no timeout)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name!r}>"

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function tool: ``{"type": "function", "function": {name, description, parameters}}``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def bind_arguments(self, arguments: Any) -> tuple[list[Any], dict[str, Any]]:
        """Convert a model's ``arguments`` to call arguments; ``msgspec.ValidationError`` when they do not fit."""
        converted = msgspec.convert(arguments, self._args_type)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for name, positional_only, default in self._binding:
            value = getattr(converted, name)
            if positional_only:
                args.append(default if value is msgspec.UNSET else value)
            elif value is not msgspec.UNSET:
                kwargs[name] = value
        return args, kwargs

    def invoke(self, arguments: Any) -> Awaitable[ToolOutcome]:
        """Validate ``arguments``, run the tool (bounded by ``timeout``), and say what the model reads.

        Raises only cancellation and the pause signal of ``interrupt()``. A tool that raises is also a
        WARNING with its traceback on the ``"tether"`` logger; every outcome that ends the call (with
        its duration) is an INFO event, when INFO is enabled as the call starts (else the call is
        awaited with no layer of its own).
        """
        if LOGGER.isEnabledFor(logging.INFO):
            return self._logged(arguments)
        return self._invoke(arguments)

    async def _logged(self, arguments: Any) -> ToolOutcome:
        started = time.perf_counter()
        outcome = await self._invoke(arguments)
        _log.info(
            "tool finished",
            **_run_fields(),
            tool=self.name,
            outcome=outcome.error or "ok",
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return outcome

    async def _invoke(self, arguments: Any) -> ToolOutcome:
        try:
            args, kwargs = self.bind_arguments(arguments)
        except msgspec.ValidationError as exc:
            return ToolOutcome(
                content=f"Tool '{self.name}' got invalid arguments: {exc}", ok=False, error="arguments"
            )
        call = functools.partial(self.fn, *args, **kwargs)
        try:
            if self.timeout is None and self.is_async:
                result = await call()  # no layer of _run's between the step and the tool
            elif self.timeout is None:
                result = await self._run(call, abandon=False)
            else:
                with anyio.move_on_after(self.timeout) as scope:
                    result = await self._run(call, abandon=True)
                if scope.cancelled_caught:
                    return ToolOutcome(
                        content=f"Tool '{self.name}' timed out after {self.timeout:g}s",
                        ok=False,
                        error="timeout",
                    )
        except Exception as exc:
            content = f"Tool '{self.name}' failed: {type(exc).__name__}: {exc}"
            # The model reads the error; the developer gets it too, with where it came from.
            _log.warning("tool raised", **_run_fields(), tool=self.name, error=content, exc_info=exc)
            return ToolOutcome(content=content, ok=False, error="raised")
        try:
            value = normalize(result)
        except SerializationError as exc:
            content = f"Tool '{self.name}' returned a value that is not JSON: {exc}"
            # As for a tool that raises: the model reads it, and the developer hears of it.
            _log.warning(
                "tool returned a value that is not JSON", **_run_fields(), tool=self.name, error=content
            )
            return ToolOutcome(content=content, ok=False, error="result")
        content = value if isinstance(value, str) else encode(value).decode()
        return ToolOutcome(content=content, value=value)

    async def _run(self, call: Callable[[], Any], *, abandon: bool) -> Any:
        if self.is_async:
            return await call()
        ctx = current_context()
        if abandon or ctx is None or ctx.stopped is None:
            result = await anyio.to_thread.run_sync(call, abandon_on_cancel=abandon)
        else:  # waited for through a stop, abandoned when the run is cancelled from another process
            finished, result = await ctx.stopped.in_thread(call)
            if not finished:
                raise StepAbandoned(cancelled_elsewhere(ctx.execution_id))
        if inspect.isawaitable(result):  # a sync callable that returned a coroutine after all
            result = await result
        return result


def _run_fields() -> dict[str, Any]:
    """The run a tool is called in, for its log events (nothing outside a run)."""
    ctx = current_context()
    if ctx is None:
        return {}
    return {
        "execution_id": ctx.execution_id,
        "agent_path": ctx.agent_path,
        "node_id": ctx.node_id,
        "seq": ctx.step,
    }


def _is_async(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph (as one line) and per-parameter descriptions (Google or Sphinx style)."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or _SECTION.match(stripped) or stripped.startswith(":"):
            break
        summary.append(stripped)
    params: dict[str, str] = {}
    mode: str | None = None  # "google" inside an Args: section, "sphinx" after a :param line
    current: str | None = None
    section_indent = 0
    entry_indent: int | None = None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        sphinx = _SPHINX_PARAM.match(stripped)
        if sphinx:
            mode, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
        elif _SECTION.match(stripped):
            mode, current, section_indent, entry_indent = "google", None, indent, None
        elif mode == "google":
            if not stripped:
                continue
            if indent <= section_indent:
                mode, current = None, None
                continue
            if entry_indent is None:
                entry_indent = indent
            match = _GOOGLE_PARAM.match(stripped)
            if indent == entry_indent and match:
                current = match.group(1).lstrip("*")
                params[current] = match.group(3).strip()
            elif current is not None:
                params[current] = f"{params[current]} {stripped}".strip()
        elif mode == "sphinx" and current is not None and stripped and indent > 0:
            params[current] = f"{params[current]} {stripped}".strip()
        else:
            mode, current = None, None
    return " ".join(summary), params


def _build_arguments(
    fn: Callable[..., Any], signature: inspect.Signature, tool_name: str, param_docs: dict[str, str]
) -> tuple[type[msgspec.Struct], dict[str, Any]]:
    """A msgspec Struct type that checks the arguments, and the parameters' JSON schema."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise TypeError(f"tool {tool_name!r}: cannot resolve its type annotations: {exc}") from exc
    fields: list[tuple[str, Any, Any]] = []
    names: list[str] = []
    types: list[Any] = []
    defaults: dict[str, Any] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name!r}: *args and **kwargs cannot be described to a model")
        annotation = hints.get(param.name, Any)
        if param.default is inspect.Parameter.empty:
            fields.append((param.name, annotation, msgspec.NODEFAULT))
            required.append(param.name)
        else:
            fields.append((param.name, typing.Union[annotation, msgspec.UnsetType], msgspec.UNSET))  # noqa: UP007
            defaults[param.name] = param.default
        names.append(param.name)
        types.append(annotation)
    try:
        args_type = msgspec.defstruct(
            f"{tool_name}_arguments", fields, kw_only=True, forbid_unknown_fields=True
        )
        schemas, components = msgspec.json.schema_components(types, ref_template="#/$defs/{name}")
    except (TypeError, ValueError) as exc:
        raise TypeError(f"tool {tool_name!r}: a parameter type cannot be checked as JSON: {exc}") from exc
    properties: dict[str, Any] = {}
    for name, schema in zip(names, schemas, strict=True):
        prop = dict(schema)
        if param_docs.get(name):
            prop["description"] = param_docs[name]
        if name in defaults:
            try:
                prop["default"] = normalize(defaults[name])
            except SerializationError:
                pass
        properties[name] = prop
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    parameters["additionalProperties"] = False
    if components:
        parameters["$defs"] = components
    return args_type, parameters


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, timeout: float | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a tool: ``@tool``, or ``@tool(name=..., description=..., timeout=seconds)``.

    A timeout's expiry is a tool error the model reads; a sync tool's thread cannot be stopped and
    finishes in the background (its result is dropped).
    """
    if fn is not None:
        return Tool(fn, name=name, description=description, timeout=timeout)

    def decorate(func: Callable[..., Any]) -> Tool:
        return Tool(func, name=name, description=description, timeout=timeout)

    return decorate
