"""Which tool calls a tool trigger names (``on_tool_success`` / ``on_tool_error`` entries).

An entry is a tool's name (``run_tests``), or a name and a regular expression in parentheses,
spelled as Claude Code spells its permission rules (``Bash(pytest|cargo test)``): the call must
be to that tool (names are exact) and the regex must be found in the command it runs. Agents run
their tests, builds and commits through one shell tool (Claude Code ``Bash``, Codex
``exec_command`` / ``shell``, opencode and mini-swe-agent ``bash``), so a name alone cannot tell
a test run from ``ls``.

The command is the call's ``command`` or ``cmd`` argument (a list, Codex's ``shell`` argv, joined
by spaces); a call without either is matched on its arguments as sent (JSON text).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from proxy.types import ChatMessage

_ENTRY = re.compile(r"\s*([^()\s]+)\s*(?:\((.*)\))?\s*", re.DOTALL)
_COMMAND_KEYS = ("command", "cmd")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call whose result arrived: the tool's name and the command it ran."""

    name: str
    command: str


@dataclass(frozen=True, slots=True)
class ToolMatch:
    name: str
    pattern: re.Pattern[str] | None = None

    @classmethod
    def parse(cls, entry: str) -> ToolMatch:
        """ValueError when the entry is not ``name`` or ``name(regex)``, or the regex is bad."""
        found = _ENTRY.fullmatch(entry)
        if found is None:
            raise ValueError(f"{entry!r} is not a tool name or 'Tool(regex)'")
        name, regex = found.groups()
        if regex is None:
            return cls(name)
        try:
            return cls(name, re.compile(regex))
        except re.error as exc:
            raise ValueError(f"{entry!r}: not a valid regex: {exc}") from exc

    def matches(self, call: ToolCall) -> bool:
        if call.name != self.name:
            return False
        return self.pattern is None or self.pattern.search(call.command) is not None


@lru_cache(maxsize=256)
def tool_matches(entries: tuple[str, ...]) -> tuple[ToolMatch, ...]:
    """A trigger's entries, parsed once per distinct policy (checked when the config loads)."""
    return tuple(ToolMatch.parse(entry) for entry in entries)


def command_of(arguments: object) -> str:
    """What a call runs, from its arguments (a JSON string or an object)."""
    data = arguments
    if isinstance(arguments, str):
        try:
            data = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    if isinstance(data, dict):
        for key in _COMMAND_KEYS:
            value = data.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, list):
                return " ".join(str(part) for part in value)
    return arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)


def calls_of(message: ChatMessage) -> dict[str, ToolCall]:
    """Tool call id -> the call, for an assistant message's calls."""
    calls: dict[str, ToolCall] = {}
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict) and isinstance(call.get("id"), str):
            function = call.get("function") or call.get("custom") or {}
            if isinstance(function, dict):
                name = str(function.get("name", ""))
                raw = function.get("arguments", function.get("input", ""))
                calls[call["id"]] = ToolCall(name, command_of(raw))
    return calls
