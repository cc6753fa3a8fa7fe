"""interrupt() and Resume: the pause signal, the frozen context, strict decisions."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import msgspec
import pytest

from actors import Resume, current_run, interrupt
from actors.lowlevel import PauseSignal, RunContext, bind, bind_run, current_context, current_resume
from stores import SerializationError, TetherError


def test_resume_refuses_unknown_fields() -> None:
    with pytest.raises(TypeError, match="data"):
        Resume(approved=True, data=1)  # type: ignore[call-arg]
    with pytest.raises(msgspec.ValidationError, match="unknown field `data`"):
        Resume.from_dict({"approved": True, "data": 1})
    with pytest.raises(msgspec.ValidationError):
        Resume.from_dict({"approved": "yes"})


def test_resume_is_frozen_and_round_trips() -> None:
    r = Resume(approved=True, metadata={"approver": "alice"})
    with pytest.raises(AttributeError):
        r.approved = False  # type: ignore[misc]
    assert Resume(False).metadata == {}
    assert r.to_dict() == {"approved": True, "metadata": {"approver": "alice"}}
    assert Resume.from_dict(r.to_dict()) == r
    with pytest.raises(TypeError, match=r"\$\.metadata\.when"):
        Resume(True, {"when": datetime.now()})


def test_signal_is_not_an_exception_or_a_tether_error() -> None:
    assert issubclass(PauseSignal, BaseException)
    assert not issubclass(PauseSignal, Exception)
    assert not issubclass(PauseSignal, TetherError)


def test_first_pass_raises_with_context_frozen_at_the_call() -> None:
    context = {"amount": 500, "items": [1, 2], "order": ("a", 1)}
    with bind_run("e1"), pytest.raises(PauseSignal) as info:
        try:
            interrupt("approve refund", context)
        finally:
            context["amount"] = 1  # the caller changes its dict afterwards
            context["items"].append(3)  # type: ignore[attr-defined]
    assert info.value.reason == "approve refund"
    assert info.value.context == {"amount": 500, "items": [1, 2], "order": ["a", 1]}


def test_non_json_context_raises_serialization_error_with_path() -> None:
    with bind_run("e1"), pytest.raises(SerializationError) as info:
        interrupt("why", {"nested": {"when": datetime.now()}})
    assert info.value.path == "$.context.nested.when"
    with pytest.raises(SerializationError, match=r"NaN|finite"):
        interrupt("why", {"x": float("nan")})
    with pytest.raises(TypeError, match="dict"):
        interrupt("why", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reason"):
        interrupt(42, {})  # type: ignore[arg-type]


def test_resume_bound_for_the_call_is_returned_every_time() -> None:
    decision = Resume(approved=False, metadata={"approver": "bob"})
    with bind_run("e1", agent_path="agent:a/tool:refund", resume=decision):
        assert current_resume() is decision
        assert interrupt("approve", {"a": 1}) is decision
        assert interrupt("approve again", {}) is decision
    assert current_resume() is None


def test_outside_a_run_interrupt_still_signals() -> None:
    assert current_run() is None
    with pytest.raises(PauseSignal, match="pauses"):
        interrupt("why")


def test_bindings_nest_and_restore() -> None:
    ctx = RunContext(execution_id="e1", agent_path="agent:a")
    with bind(ctx):
        assert current_context() is ctx
        inner = dataclasses.replace(ctx, agent_path="agent:a/tool:t", node_id="turn:0/tool:t")
        with bind(inner):
            run = current_run()
            assert run is not None
            assert (run.execution_id, run.agent_path, run.node_id) == (
                "e1",
                "agent:a/tool:t",
                "turn:0/tool:t",
            )
        assert current_context() is ctx
    assert current_context() is None
