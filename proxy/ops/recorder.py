"""Opt-in recording of chat requests, as transcripts for ``compaction-proxy eval``.

Off by default (``record.path: null``): with it set, every chat completion request body, as the
client sent it (its full history, message content included), is appended to a JSONL file with
the conversation id in a ``conversation`` field. The recorder hears each request as a
``proxy.proxying.events.RequestRead`` (``subscribe``): the route is not asked to call it.
That file holds what users typed and what tools returned: it is written only because the
operator asked, and should be treated like the conversations themselves. Each line is one ``os.write`` on a file opened for appending, so
workers sharing the file do not interleave lines. A failure to write is logged and the request
goes on.
"""

from __future__ import annotations

import logging
import os

from proxy import wirejson
from proxy.config.settings import RecordSettings
from proxy.config.store import ConversationSettings
from proxy.errors import ProxyError
from proxy.events import Listeners
from proxy.proxying.events import RequestRead
from proxy.state.tenancy import conversation_header

logger = logging.getLogger("proxy.recorder")


class Recorder:
    def __init__(self, path: str, *, conversation: ConversationSettings) -> None:
        self.path = path
        self._conversation = conversation

    @classmethod
    def from_settings(
        cls, record: RecordSettings, *, conversation: ConversationSettings
    ) -> Recorder | None:
        path = record.path
        return cls(path, conversation=conversation) if path else None

    def subscribe(self, listeners: Listeners) -> None:
        listeners.subscribe(RequestRead, self.write)

    def write(self, request: RequestRead) -> None:
        """Append a request of a dialect that ``records`` (chat completions)."""
        try:
            body = request.body
        except ProxyError:
            return  # not a chat request anyone could replay; the request path answers it
        named = conversation_header(request.headers, self._conversation)
        if named is not None:
            body = {**body, "conversation": named[1]}
        line = wirejson.encode(body) + b"\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError as exc:
            logger.warning("could not record a request to %s: %s", self.path, exc.strerror)
