"""Types every layer shares: the ASGI callables, raw HTTP headers and a request's header view.

``RawHeaders`` is the ASGI and upstream shape (lower-case names as bytes, in order, repeats
kept). ``HeaderView`` reads them once per request into a ``str`` mapping: everything that asks
"what did the client send in header X" asks the view, never the raw list again.

``ChatMessage``, ``ToolCall`` and ``ContentPart`` are a message, a tool call and a content part
in the neutral (chat completions) shape, as each dialect builds them from its own wire items and
the core counts and the summarizer reads them; ``MessageView`` is how read-only code takes a
message, typed or still a plain dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Required, TypedDict

from starlette.types import Message, Receive, Scope, Send

__all__ = [
    "JSON",
    "AnthropicBlock",
    "AnthropicMessage",
    "ChatMessage",
    "ContentPart",
    "CustomCall",
    "CustomToolCall",
    "FileData",
    "FilePart",
    "FunctionCall",
    "FunctionSchema",
    "FunctionTool",
    "FunctionToolCall",
    "HeaderView",
    "ImagePart",
    "ImageUrl",
    "Message",
    "MessageView",
    "OtherPart",
    "RawHeaders",
    "Receive",
    "RefusalPart",
    "ResponsesItem",
    "Scope",
    "Send",
    "TextPart",
    "ToolCall",
]

RawHeaders = list[tuple[bytes, bytes]]
JSON = dict[str, Any]  # a parsed JSON object, as a request or response body holds it


class FunctionCall(TypedDict):
    name: str
    arguments: str  # JSON text, as chat completions carries a function's arguments


class FunctionToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class CustomCall(TypedDict):
    name: str
    input: str  # free text: a custom tool (Responses' custom_tool_call) takes no JSON


class CustomToolCall(TypedDict):
    id: str
    type: Literal["custom"]
    custom: CustomCall


ToolCall = FunctionToolCall | CustomToolCall


class FunctionSchema(TypedDict):
    name: str
    description: str
    parameters: Any  # the tool's JSON Schema, as the client sent it: any JSON value


class FunctionTool(TypedDict):
    """A tool definition in the chat shape (what the token counter reads of a request's tools)."""

    type: Literal["function"]
    function: FunctionSchema


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class RefusalPart(TypedDict):
    type: Literal["refusal"]
    refusal: str


class ImageUrl(TypedDict):
    # Empty or None when the image is not a URL the proxy reads (an Anthropic image, a Responses
    # image by file id): images are counted, never shown.
    url: str | None
    detail: NotRequired[str | None]


class ImagePart(TypedDict):
    type: Literal["image_url"]
    image_url: ImageUrl


class FileData(TypedDict):
    file_data: str
    filename: NotRequired[str]


class FilePart(TypedDict):
    type: Literal["file"]
    file: FileData


class OtherPart(TypedDict):
    """A part of a kind the proxy does not read (counted as nothing, named in transcripts)."""

    type: str


ContentPart = TextPart | RefusalPart | ImagePart | FilePart | OtherPart


class ChatMessage(TypedDict, total=False):
    """A message of the neutral conversation: the chat completions shape the core plans on.

    Every field is optional to the type (a client's message is checked by
    ``proxy.core.messages.validate_messages``, which is where ``role`` becomes certain); fields
    not named here (provider extensions) are carried through untouched and never read. The
    underscored keys are the proxy's own, put on by a dialect and never sent as they are.
    """

    role: str
    content: str | list[ContentPart] | None
    name: str
    tool_calls: list[ToolCall] | None
    tool_call_id: str
    function_call: FunctionCall | None  # the legacy single call, hashed and shown, never made
    refusal: str | None
    audio: Any  # an assistant's audio reply reference, hashed as the client sent it
    # The wire items this message stands for (``proxy.dialects.base``): any JSON, the dialect's.
    _wire: list[Any]
    _hash: Any  # what of those wire items reaches the model, hashed into the chain
    _failed: bool  # a tool result its provider marked an error (``proxy.core.messages.FAILED``)
    _pinned: bool  # never summarized, cleared or dropped (``proxy.core.pins.PINNED``)


class AnthropicBlock(TypedDict, total=False):
    """A content block of Anthropic's Messages API, as ``parse_messages_body`` checked it: a
    string ``type``; a text block's ``text``, a tool_use's ``id`` and ``name`` and a
    tool_result's ``tool_use_id`` are strings. Other kinds and fields are carried as sent."""

    type: Required[str]
    text: str
    id: str
    name: str
    input: Any  # a tool call's arguments: any JSON
    tool_use_id: str
    content: str | list[AnthropicBlock]  # a tool_result's
    is_error: bool
    cache_control: Any  # a cache breakpoint, moved by clients from turn to turn


class AnthropicMessage(TypedDict):
    """One entry of a Messages request's ``messages`` (role user, assistant or system)."""

    role: str
    content: str | list[AnthropicBlock]


class ResponsesItem(TypedDict, total=False):
    """An item of a Responses API ``input`` (or a response's ``output``): a message, a call, a
    call's output, reasoning, a compaction, a hosted tool's item. Only the fields the proxy reads
    or writes are named; other kinds and fields are carried as the client sent them. What is
    checked before a field is read is ``proxy.dialects.responses``'s business."""

    type: str
    id: str
    role: str
    content: Any  # a message's string or parts, reasoning's parts: the API's many part kinds
    call_id: str
    name: str
    arguments: str  # a function_call's JSON text
    input: str  # a custom_tool_call's free text
    output: Any  # a call's output: a string or parts
    encrypted_content: str  # a compaction's (or reasoning's) opaque payload


# A message as read-only code takes it: a ChatMessage, or the plain dict a caller outside the core
# still holds (a TypedDict is no dict[str, Any] to the type checker, but both are this Mapping).
MessageView = Mapping[str, Any]


@dataclass(frozen=True)
class HeaderView:
    """A request's headers as received (``raw``) and read once into lower-cased names
    (``values``; for a repeated header the last value wins, as the proxy always read them)."""

    raw: RawHeaders
    values: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, raw: RawHeaders) -> HeaderView:
        values = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
        return cls(raw=raw, values=values)

    def get(self, name: str, default: str | None = None) -> str | None:
        """The value of header ``name`` (any case), or ``default``."""
        return self.values.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self.values
