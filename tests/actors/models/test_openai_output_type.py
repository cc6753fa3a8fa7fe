"""An agent's output_type over OpenAIChat: the request carries response_format with the JSON schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from _chat_server import ChatServer, ok, serve

from actors import ActorSystem, Agent, tool
from actors.models import OpenAIChat
from stores import SQLiteStore

pytestmark = pytest.mark.anyio


class Refund(msgspec.Struct):
    order: str
    amount: int


@tool
def order_total(order: str) -> int:
    """The order's total."""
    return 30


@pytest.fixture
def server() -> Iterator[ChatServer]:
    yield from serve()


async def test_the_request_carries_a_json_schema_response_format(server: ChatServer, tmp_path: Path) -> None:
    server.script = [
        ok({"role": "assistant", "content": '{"order": "o1", "amount": "30"}'}),
        ok({"role": "assistant", "content": '{"order": "o1", "amount": 30}'}),
    ]
    async with OpenAIChat("gpt-test", base_url=server.base_url, api_key="sk-test") as model:
        agent = Agent("refunds", model, tools=[order_total], output_type=Refund)
        async with ActorSystem(SQLiteStore(tmp_path / "t.db")) as system:
            result = await (await system.spawn(agent, "refund o1")).result(timeout=30)
    assert result.status == "completed", result.error
    assert result.value == Refund("o1", 30)
    first, second = (request.body for request in server.requests)
    assert list(first) == ["model", "messages", "tools", "response_format"]
    assert [t["function"]["name"] for t in first["tools"]] == ["order_total"]
    response_format = first["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "Refund"
    assert response_format["json_schema"]["schema"]["required"] == ["order", "amount"]
    assert second["response_format"] == response_format
    assert "Expected `int`, got `str` - at `$.amount`" in second["messages"][-1]["content"]
