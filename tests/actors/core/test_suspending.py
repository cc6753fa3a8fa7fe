"""``within`` and ``suspending``: what only a waiting operation needs is armed as it first waits,
and the operation behaves as under a plain ``await`` (values, errors, cancellation, scopes it opens)."""

from __future__ import annotations

import math

import anyio
import anyio.lowlevel
import pytest

from actors.lowlevel import cancel_scope, loop_time, suspending, within


async def _at_once() -> int:
    return 7


async def _waits(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "woke"


async def _raises() -> None:
    raise ValueError("no")


async def _raises_after_waiting() -> None:
    await anyio.lowlevel.checkpoint()
    raise ValueError("later")


@pytest.mark.anyio
async def test_an_operation_that_does_not_wait_arms_nothing() -> None:
    armed: list[bool] = []
    assert await suspending(_at_once(), lambda: armed.append(True)) == 7
    assert armed == []
    with cancel_scope(shield=True) as scope:
        assert await within(scope, loop_time() + 5.0, _at_once()) == 7
        assert scope.deadline == math.inf


@pytest.mark.anyio
async def test_an_operation_that_waits_is_armed_once_and_returns_its_value() -> None:
    armed: list[bool] = []
    assert await suspending(_waits(0.01), lambda: armed.append(True)) == "woke"
    assert armed == [True]
    deadline = loop_time() + 5.0
    with cancel_scope(shield=True) as scope:
        assert await within(scope, deadline, _waits(0.01)) == "woke"
        assert scope.deadline == deadline


@pytest.mark.anyio
async def test_errors_pass_through_before_and_after_the_first_wait() -> None:
    with pytest.raises(ValueError, match="no"):
        await suspending(_raises(), lambda: None)
    with pytest.raises(ValueError, match="later"):
        await suspending(_raises_after_waiting(), lambda: None)


@pytest.mark.anyio
async def test_the_deadline_bounds_a_wait_and_a_shield_holds_off_an_outer_cancel() -> None:
    with cancel_scope(shield=True) as scope:
        await within(scope, loop_time() + 0.05, _waits(10))
    assert scope.cancelled_caught
    with anyio.CancelScope() as outer:
        with cancel_scope(shield=True) as inner:
            outer.cancel()
            assert await within(inner, loop_time() + 5.0, _waits(0.01)) == "woke"
        await anyio.lowlevel.checkpoint()  # the outer cancel lands here, past the shield
    assert outer.cancelled_caught and not inner.cancelled_caught


@pytest.mark.anyio
async def test_a_scope_the_operation_opens_before_it_waits_nests_inside() -> None:
    async def opens_a_scope() -> bool:
        with anyio.move_on_after(0.01) as timeout:
            await anyio.sleep(10)
        return timeout.cancelled_caught

    with cancel_scope(shield=True) as scope:
        assert await within(scope, loop_time() + 5.0, opens_a_scope()) is True
    assert not scope.cancelled_caught


@pytest.mark.anyio
async def test_a_cancel_reaches_the_operation_while_it_waits() -> None:
    reached: list[bool] = []

    async def noted() -> None:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            reached.append(True)
            raise

    with anyio.move_on_after(0.01) as outer:
        await suspending(noted(), lambda: None)
    assert outer.cancelled_caught and reached == [True]
