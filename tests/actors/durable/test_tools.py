"""@tool: schemas from signatures and docstrings, checked arguments, errors the model reads."""

from __future__ import annotations

import threading
import time
from typing import Any, Literal

import anyio
import anyio.lowlevel
import msgspec
import pytest

from actors import Resume, current_run, interrupt, tool
from actors.lowlevel import PauseSignal, Tool, ToolOutcome, bind_run


class Address(msgspec.Struct):
    city: str
    zip: str | None = None


@tool
def ship(
    order_id: str, qty: int, to: Address, speed: Literal["slow", "fast"] = "slow", note: str | None = None
) -> dict[str, Any]:
    """Ship an order to an address.

    More detail that is not part of the description.

    Args:
        order_id: The order to ship.
        qty (int): How many items,
            at least one.
        to: Where to.
    """
    return {"order_id": order_id, "qty": qty, "city": to.city, "speed": speed, "note": note}


def test_schema_from_signature_and_docstring() -> None:
    schema = ship.schema()
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "ship"
    assert fn["description"] == "Ship an order to an address."
    params = fn["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["order_id", "qty", "to"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert props["order_id"] == {"type": "string", "description": "The order to ship."}
    assert props["qty"] == {"type": "integer", "description": "How many items, at least one."}
    assert props["to"]["$ref"] == "#/$defs/Address"
    assert params["$defs"]["Address"]["required"] == ["city"]
    assert props["speed"] == {"enum": ["fast", "slow"], "default": "slow"}
    assert props["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    # The schema is plain JSON.
    msgspec.json.encode(schema)


def test_sphinx_docstring_and_options() -> None:
    @tool(name="lookup-v2", description="Override.", timeout=2)
    def lookup(
        key: str, tags: list[str] | None = None, opts: dict[str, Any] | None = None, f: float = 1.5
    ) -> str:
        """Look a key up.

        :param key: the key
        :param tags: labels
            to filter by
        """
        return key

    assert lookup.name == "lookup-v2"
    assert lookup.timeout == 2
    params = lookup.schema()["function"]
    assert params["description"] == "Override."
    props = params["parameters"]["properties"]
    assert props["key"]["description"] == "the key"
    assert props["tags"]["description"] == "labels to filter by"
    assert props["f"] == {"type": "number", "default": 1.5}
    assert lookup("x") == "x"  # the tool object still calls the function


def test_bad_definitions_are_refused() -> None:
    with pytest.raises(ValueError, match="tool name"):
        tool(name="has space")(lambda: None)
    with pytest.raises(TypeError, match=r"\*args"):

        @tool
        def star(*args: int) -> None: ...

    with pytest.raises(ValueError, match="timeout"):
        tool(name="t", timeout=0)(lambda: None)


@pytest.mark.anyio
async def test_valid_arguments_are_converted() -> None:
    out = await ship.invoke({"order_id": "1042", "qty": 2, "to": {"city": "Oslo"}})
    assert out == ToolOutcome(
        content='{"order_id":"1042","qty":2,"city":"Oslo","speed":"slow","note":null}',
        value={"order_id": "1042", "qty": 2, "city": "Oslo", "speed": "slow", "note": None},
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"order_id": 1042, "qty": 2, "to": {"city": "Oslo"}}, "Expected `str`, got `int` - at `$.order_id`"),
        ({"order_id": "1", "qty": "2", "to": {"city": "Oslo"}}, "at `$.qty`"),
        ({"order_id": "1", "qty": 2}, "missing required field `to`"),
        ({"order_id": "1", "qty": 2, "to": {"city": "Oslo"}, "extra": 1}, "unknown field `extra`"),
        ({"order_id": "1", "qty": 2, "to": {"city": "Oslo"}, "speed": "warp"}, "at `$.speed`"),
        ({"order_id": "1", "qty": 2, "to": {"town": "Oslo"}}, "$.to"),
        (["1", 2], "Expected `object`"),
    ],
)
async def test_bad_arguments_are_a_tool_error_the_model_reads(arguments: Any, fragment: str) -> None:
    calls: list[Any] = []

    @tool
    def ship2(order_id: str, qty: int, to: Address, speed: Literal["slow", "fast"] = "slow") -> str:
        calls.append(order_id)
        return "shipped"

    out = await ship2.invoke(arguments)
    assert not out.ok and out.error == "arguments"
    assert out.content.startswith("Tool 'ship2' got invalid arguments: ")
    assert fragment in out.content
    assert calls == []  # validated BEFORE the call


@pytest.mark.anyio
async def test_async_tool_and_positional_only_and_omitted_defaults() -> None:
    @tool
    async def add(a: int, /, b: int = 10, *, c: int = 100) -> int:
        """Add numbers."""
        await anyio.lowlevel.checkpoint()
        return a + b + c

    assert add.is_async
    assert (await add.invoke({"a": 1})).value == 111
    assert (await add.invoke({"a": 1, "c": 0})).content == "11"


@pytest.mark.anyio
async def test_a_raising_tool_is_an_error_the_model_reads() -> None:
    @tool
    def explode(reason: str) -> None:
        raise ValueError(reason)

    @tool
    async def explode_async() -> None:
        raise KeyError("k")

    out = await explode.invoke({"reason": "card declined"})
    assert out == ToolOutcome(
        content="Tool 'explode' failed: ValueError: card declined", ok=False, error="raised"
    )
    assert (await explode_async.invoke({})).content == "Tool 'explode_async' failed: KeyError: 'k'"


@pytest.mark.anyio
async def test_non_json_result_is_an_error_the_model_reads() -> None:
    @tool
    def give_set() -> set[int]:
        return {1}

    out = await give_set.invoke({})
    assert not out.ok and out.error == "result"
    assert "not JSON" in out.content and "set" in out.content


@pytest.mark.anyio
async def test_none_and_str_results() -> None:
    assert (await tool(name="none")(lambda: None).invoke({})).content == "null"
    assert (await tool(name="plain")(lambda: "plain").invoke({})).content == "plain"


@pytest.mark.anyio
async def test_timeout_async_tool() -> None:
    @tool(timeout=0.05)
    async def slow() -> str:
        await anyio.sleep(10)
        return "never"

    with anyio.fail_after(5):
        out = await slow.invoke({})
    assert out == ToolOutcome(content="Tool 'slow' timed out after 0.05s", ok=False, error="timeout")


@pytest.mark.anyio
async def test_timeout_sync_tool_is_abandoned_not_waited_for() -> None:
    release = threading.Event()

    @tool(timeout=0.05)
    def stuck() -> str:
        release.wait(5)
        return "late"

    start = time.monotonic()
    with anyio.fail_after(5):
        out = await stuck.invoke({})
    assert out.error == "timeout" and "timed out after 0.05s" in out.content
    assert time.monotonic() - start < 2
    release.set()


@pytest.mark.anyio
async def test_own_timeout_error_is_not_our_timeout() -> None:
    @tool(timeout=5)
    async def raises_timeout() -> None:
        raise TimeoutError("upstream")

    out = await raises_timeout.invoke({})
    assert out.content == "Tool 'raises_timeout' failed: TimeoutError: upstream"


@pytest.mark.anyio
async def test_current_run_inside_sync_and_async_tools() -> None:
    @tool
    def where_sync() -> dict[str, Any]:
        run = current_run()
        assert run is not None
        return {"id": run.execution_id, "path": run.agent_path, "thread": threading.current_thread().name}

    @tool
    async def where_async() -> Any:
        run = current_run()
        return None if run is None else [run.execution_id, run.agent_path]

    assert (await where_async.invoke({})).value is None
    with bind_run("exec-1", agent_path="agent:bot/tool:where_sync"):
        out = await where_sync.invoke({})
        assert out.value["id"] == "exec-1" and out.value["path"] == "agent:bot/tool:where_sync"
        assert out.value["thread"] != threading.current_thread().name  # ran in a worker thread
        assert (await where_async.invoke({})).value == ["exec-1", "agent:bot/tool:where_sync"]
    assert current_run() is None


@pytest.mark.anyio
async def test_interrupt_passes_through_sync_and_async_tools_even_past_except_exception() -> None:
    @tool
    def approve_sync(amount: int) -> str:
        try:
            decision = interrupt("approve refund", {"amount": amount})
        except Exception:  # a broad handler must not swallow the pause
            return "swallowed"
        return f"approved={decision.approved}"

    @tool
    async def approve_async(amount: int) -> str:
        try:
            decision = interrupt("approve refund", {"amount": amount})
        except Exception:
            return "swallowed"
        return f"approved={decision.approved}"

    for t in (approve_sync, approve_async):
        with bind_run("exec-2"), pytest.raises(PauseSignal) as info:
            await t.invoke({"amount": 500})
        assert info.value.reason == "approve refund" and info.value.context == {"amount": 500}
        with bind_run("exec-2", resume=Resume(approved=True)):
            assert (await t.invoke({"amount": 500})).content == "approved=True"


@pytest.mark.anyio
async def test_cancellation_is_not_swallowed() -> None:
    started = anyio.Event()

    @tool
    async def forever() -> None:
        started.set()
        await anyio.sleep(10)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:

            async def go() -> None:
                await forever.invoke({})
                pytest.fail("invoke returned after cancellation")

            tg.start_soon(go)
            await started.wait()
            tg.cancel_scope.cancel()


def test_tool_is_a_tool_and_keeps_function_metadata() -> None:
    assert isinstance(ship, Tool)
    assert ship.__name__ == "ship"
    assert ship.__doc__ is not None and ship.__doc__.startswith("Ship an order")
    assert repr(ship) == "<tool 'ship'>"
