"""What a user who passes the wrong thing sees: a typed error naming it, and nothing written.

``spawn`` with input of the wrong type raises ``TypeError`` naming the type; an invalid
``execution_id`` raises ``InvalidExecutionId``; an id that has rows raises ``RunExists`` saying what
to do; a ``Resume`` whose metadata holds a lone surrogate raises ``SerializationError`` naming the
path. Both backends.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from conftest import Backend

from actors import ActorSystem, Agent, Resume, RunExists
from actors.models import FunctionModel, Message
from stores import MAX_EXECUTION_ID, InvalidExecutionId

pytestmark = pytest.mark.anyio


def _agent() -> Agent:
    return Agent("echo", FunctionModel(lambda messages: "ok"))


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (b"refund please", "spawn input is a str or a list of Message, not bytes"),
        (42, "spawn input is a str or a list of Message, not int"),
        (None, "spawn input is a str or a list of Message, not NoneType"),
        ({"role": "user"}, "spawn input is a str or a list of Message, not dict"),
        (["hello"], "item 0 of this list is a str"),
        ((Message("user", "a"), {"role": "user", "content": "b"}), "item 1 of this tuple is a dict"),
    ],
    ids=["bytes", "int", "none", "dict", "list-of-str", "tuple-with-dict"],
)
async def test_spawn_input_of_a_wrong_type_is_a_type_error_naming_it(
    store_backend: Backend, given: Any, words: str
) -> None:
    agent = _agent()
    store = store_backend.open()
    with anyio.fail_after(20):
        async with store, ActorSystem(store, runners=[agent]) as system:
            with pytest.raises(TypeError, match=words):
                await system.spawn(agent, given, execution_id="typed-1")
            assert await store.history("typed-1") == []
            result = await (
                await system.spawn(agent, [Message("user", "hi")], execution_id="typed-1")
            ).result(timeout=5)
            assert result.status == "completed"


async def test_spawn_refuses_an_invalid_execution_id_before_writing(store_backend: Backend) -> None:
    agent = _agent()
    store = store_backend.open()
    with anyio.fail_after(20):
        async with store, ActorSystem(store, runners=[agent]) as system:
            for bad, words in [
                (7, "an execution_id is a str, not int"),
                ("x" * (MAX_EXECUTION_ID + 1), f"has 1 to {MAX_EXECUTION_ID} characters"),
                ("a\ud800", "lone surrogate"),
            ]:
                with pytest.raises(InvalidExecutionId, match=words):
                    await system.spawn(agent, "hi", execution_id=bad)
            assert await system.runs() == []


async def test_run_exists_says_what_to_do(store_backend: Backend) -> None:
    agent = _agent()
    store = store_backend.open()
    with anyio.fail_after(20):
        async with store, ActorSystem(store, runners=[agent]) as system:
            await (await system.spawn(agent, "hi", execution_id="taken")).result(timeout=5)
            rows = await system.history("taken")
            with pytest.raises(RunExists) as info:
                await (await system.spawn(agent, "again", execution_id="taken")).result(timeout=5)
            assert str(info.value) == (
                "run 'taken' already has checkpoints (seq 0 starts a new run only): pick another "
                "execution_id, or fork or resume the existing run"
            )
            assert await system.history("taken") == rows


def test_resume_metadata_with_a_lone_surrogate_is_refused_when_built() -> None:
    with pytest.raises(TypeError, match=r"lone surrogate.*\$\.metadata\.note"):
        Resume(approved=True, metadata={"note": "ok \udcff"})
