"""Models a run can call: the offline :class:`FunctionModel`, the HTTP :class:`OpenAIChat`, and the
conversation types they speak (:class:`Message`, :class:`ToolCall`, :class:`ModelReply`)."""

from ._errors import ModelError
from ._function import FunctionModel
from ._openai import OpenAIChat
from ._protocol import Model
from ._types import Message, ModelReply, ToolCall

__all__ = ["FunctionModel", "Message", "Model", "ModelError", "ModelReply", "OpenAIChat", "ToolCall"]
