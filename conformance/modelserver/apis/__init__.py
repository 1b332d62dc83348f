"""The four model API shapes the scripted server speaks.

Each shape reads what it needs from a request (the tools the agent declared,
which turn and which tool round the request belongs to) into a neutral
:class:`Request`, and renders a neutral :class:`Plan` (reasoning, text and tool
items with their upstream IDs) as that API's streaming events or as its
non-streaming JSON body. Only the fields agents actually read are produced.

``base`` holds the neutral request, plan and :class:`Shape`; one module per API
(``chat``, ``responses``, ``anthropic``, ``gemini``) renders it.
"""

from __future__ import annotations

from conformance.modelserver.apis.anthropic import AnthropicMessages
from conformance.modelserver.apis.base import Shape
from conformance.modelserver.apis.chat import ChatCompletions
from conformance.modelserver.apis.gemini import Gemini
from conformance.modelserver.apis.responses import Responses

SHAPES: tuple[Shape, ...] = (ChatCompletions(), Responses(), AnthropicMessages(), Gemini())


def shape_for(path: str) -> Shape | None:
    for shape in SHAPES:
        if shape.matches(path):
            return shape
    return None
