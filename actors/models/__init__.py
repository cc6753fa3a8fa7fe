"""Models a run can call: the offline :class:`FunctionModel`, the HTTP :class:`OpenAIChat`, and the
conversation types they speak (:class:`Message`, :class:`ToolCall`, :class:`ModelReply`, :class:`Usage`)."""

from ._errors import ModelError
from ._function import FunctionModel
from ._openai import OpenAIChat
from ._protocol import Model
from ._types import Message, ModelReply, ToolCall, Usage

__all__ = ["FunctionModel", "Message", "Model", "ModelError", "ModelReply", "OpenAIChat", "ToolCall", "Usage"]
