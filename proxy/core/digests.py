"""One message's digest: the link it adds to a checkpoint's hash chain.

What of a message is hashed decides which histories may share a summary, so it lives in one
place that both the chain (``proxy.core.checkpoints``) and the per-message cache
(``proxy.core.facts``, which remembers each message's digest) read. Pure: no I/O, no state.
"""

from __future__ import annotations

import hashlib
from typing import Final

from proxy import wirejson
from proxy.types import MessageView

# The fields of a message that the model reads (OpenAI's chat message schema), so the ones that
# decide what the history *says*: two histories that differ in any of them must never share a
# summary (a legacy function_call's arguments were left out). Anything else (provider
# extensions, cache hints that clients move from message to message) is not hashed.
HASHED_FIELDS = (
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "function_call",
    "refusal",
    "audio",
)

# Wire items of another dialect that reach the model (Responses reasoning items, Anthropic
# thinking blocks), put on a neutral message by its adapter (proxy/dialects/base.py): hashed
# after the chat fields, so chat histories hash as they always did.
DIALECT_FIELD: Final = "_hash"

Message = MessageView  # kept: compaction imports it under this name


def canonical_message(message: Message) -> bytes:
    """The canonical bytes of one message: its hashed fields, absent and null treated alike.

    A JSON array of the fields' values in HASHED_FIELDS order: self-delimiting, so a history's
    messages can be hashed one after the other; objects inside (tool calls, content parts) have
    their keys sorted, independent of how the client ordered them. orjson writes it in one call
    per message (the chain is hashed on every compacted request).
    """
    get = message.get
    values = [get(name) for name in HASHED_FIELDS]
    extra = get(DIALECT_FIELD)
    if extra is not None:
        values.append(extra)
    return wirejson.canonical(values)


def message_digest(message: Message) -> bytes:
    """SHA-256 of the message's canonical bytes: what the chain is made of, one link a message.

    Fixed-length links make the chain's input unambiguous, so two histories that differ in any
    hashed field of any message have different chains unless SHA-256 collides.
    """
    return hashlib.sha256(canonical_message(message)).digest()
