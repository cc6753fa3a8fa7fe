"""OpenAIChat's request bodies are the official SDK's, byte for byte, for the same conversation.

``fixtures/openai_sdk_bodies.json`` holds what the ``openai`` SDK sent for the conversation in
``fixtures/openai_conversation.json`` (two tool calls with ``$defs`` and enum schemas, non-ASCII
text, arguments as the model spaced them, tool results), recorded on loopback by
``fixtures/record_openai_sdk.py``. The test plays the same conversation through OpenAIChat against a
loopback server answering with the same replies, and compares the bytes; it never imports the SDK.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from _chat_server import Reply, serve

from actors.models import Message, ModelReply, OpenAIChat, Usage

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.anyio
async def test_request_bodies_match_the_sdks_recorded_bodies() -> None:
    convo = json.loads((FIXTURES / "openai_conversation.json").read_text())
    recorded = json.loads((FIXTURES / "openai_sdk_bodies.json").read_text())
    assert recorded["sdk"].startswith("openai ")
    for server in serve():
        server.script = [Reply(200, reply) for reply in convo["replies"]]
        messages = [Message.from_dict(m) for m in convo["messages"]]
        async with OpenAIChat(convo["model"], base_url=server.base_url, api_key="sk-test") as model:
            with anyio.fail_after(10):
                first = await model.complete(messages, convo["tools"])
                messages.append(first.to_message())
                for call, result in zip(first.tool_calls, convo["tool_results"], strict=True):
                    messages.append(Message("tool", result, tool_call_id=call.id, name=call.name))
                final = await model.complete(messages, convo["tools"])
        assert final == ModelReply(
            "Refunded 12.50 € and told Zoë.", usage=Usage(input_tokens=200, output_tokens=12)
        )
        sent = [request.raw.decode() for request in server.requests]
    assert len(sent) == len(recorded["bodies"]) == 2
    for ours, theirs in zip(sent, recorded["bodies"], strict=True):
        assert json.loads(ours) == json.loads(theirs)
        assert ours == theirs
