"""Models a run can call: the offline :class:`FunctionModel`, the HTTP :class:`OpenAIChat`, and the
conversation types they speak (:class:`Message`, :class:`ToolCall`, :class:`ModelReply`), and
:func:`stream_text`, the hook a streaming model hands its text to."""

from ._errors import ModelError
from ._function import FunctionModel
from ._openai import OpenAIChat
from ._protocol import Model
from ._stream import stream_text
from ._types import Message, ModelReply, ToolCall

__all__ = [
    "FunctionModel",
    "Message",
    "Model",
    "ModelError",
    "ModelReply",
    "OpenAIChat",
    "ToolCall",
    "stream_text",
]
