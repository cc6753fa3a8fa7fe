"""Agent(output_type=...): the schema the model sees, the check of the answer, RunResult.value."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypedDict

import msgspec
import pytest

from actors import ActorSystem, Agent
from actors.models import FunctionModel, Message
from stores import LLM_CALL, RUN_END, SQLiteStore

pytestmark = pytest.mark.anyio


class Refund(msgspec.Struct):
    order: str
    amount: int


@dataclasses.dataclass
class Verdict:
    approved: bool
    reason: str = ""


class Tally(TypedDict):
    count: int


def _scripted(answers: list[str], seen: list[list[dict[str, Any]]] | None = None) -> FunctionModel:
    """A model that gives ``answers`` in order (recording what it is offered in ``seen``)."""
    script = iter(answers)

    def model(messages: list[Message], tools: list[dict[str, Any]]) -> str:
        if seen is not None:
            seen.append(tools)
        return next(script)

    return FunctionModel(model)


async def test_a_valid_answer_is_the_value_of_the_output_type(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []
    agent = Agent("refunds", _scripted(['{"order": "o1", "amount": 30}'], seen), output_type=Refund)
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        run = await system.spawn(agent, "refund o1")
        result = await run.result(timeout=30)
        again = await run.result(timeout=30)  # read back from the rows
        end = (await system.history(run.execution_id))[-1]
    assert result.status == "completed", result.error
    assert result.value == Refund("o1", 30)
    assert isinstance(result.value, Refund)
    assert result.output == '{"order":"o1","amount":30}'
    # The model was offered the schema, shaped as the response_format of chat completions.
    (entry,) = [t for t in seen[0] if t["type"] == "json_schema"]
    schema = entry["json_schema"]["schema"]
    assert entry["json_schema"]["name"] == "Refund"
    assert schema["type"] == "object" and schema["required"] == ["order", "amount"]
    assert schema["properties"]["amount"] == {"type": "integer"}
    assert end.step_type == RUN_END and end.state_snapshot["output_type"].endswith("Refund")
    assert again.output == result.output


@pytest.mark.parametrize(
    ("output_type", "answer", "value"),
    [(Verdict, '{"approved": true}', Verdict(True)), (Tally, ' {"count": 3} ', {"count": 3})],
)
async def test_dataclasses_and_typed_dicts_are_output_types(
    tmp_path: Path, output_type: Any, answer: str, value: Any
) -> None:
    agent = Agent("typed", _scripted([answer]), output_type=output_type)
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        result = await (await system.spawn(agent, "go")).result(timeout=30)
    assert result.status == "completed", result.error
    assert result.value == value


async def test_an_invalid_answer_goes_back_once_naming_the_error(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []
    model = _scripted(['{"order": "o1", "amount": "thirty"}', '{"order": "o1", "amount": 30}'], seen)
    agent = Agent("refunds", model, output_type=Refund)
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        run = await system.spawn(agent, "refund o1")
        result = await run.result(timeout=30)
        rows = await system.history(run.execution_id)
    assert result.status == "completed", result.error
    assert result.value == Refund("o1", 30)
    assert [r.node_id for r in rows if r.step_type == LLM_CALL] == ["turn:0", "turn:1"]
    sent_back = rows[1].state_snapshot["messages"][-1]
    assert sent_back["role"] == "user"
    assert "Expected `int`, got `str` - at `$.amount`" in sent_back["content"]
    assert len(seen) == 2


async def test_an_answer_that_never_validates_fails_the_run_after_three_calls(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []
    agent = Agent(
        "refunds", _scripted(["not json", "{}", '{"order": 1, "amount": 2}', "{}"], seen), output_type=Refund
    )
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        run = await system.spawn(agent, "refund o1")
        result = await run.result(timeout=30)
        rows = await system.history(run.execution_id)
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("ModelError:")
    assert "Expected `str`, got `int` - at `$.order`" in result.error  # the last answer's error
    assert len(seen) == 3
    assert [r.node_id for r in rows if r.step_type == LLM_CALL] == ["turn:0", "turn:1", "turn:2"]
    assert rows[-1].step_type == RUN_END and rows[-1].status == "failed"


def test_an_output_type_must_be_a_struct_a_dataclass_or_a_typed_dict() -> None:
    with pytest.raises(TypeError, match="output_type must be a msgspec Struct"):
        Agent("bad", FunctionModel(lambda m: "x"), output_type=dict)


async def test_without_the_runner_the_value_is_the_plain_json(tmp_path: Path) -> None:
    agent = Agent("refunds", _scripted(['{"order": "o1", "amount": 30}']), output_type=Refund)
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
        await (await system.spawn(agent, "refund o1", execution_id="r1")).result(timeout=30)
    async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:  # no runner here
        result = await system.ref("r1").result(timeout=30)
    assert result.value == {"order": "o1", "amount": 30}
    assert result.output == '{"order":"o1","amount":30}'
