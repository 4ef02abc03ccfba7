"""Every dialect the app routes to provides all that its protocol declares: what compaction
reads (``Translator``: translation, native, recall) and what the route reads (``Dialect``). A
protocol that says less than the code reads, or a dialect that lacks a member, fails here."""

from __future__ import annotations

import inspect

import pytest

from proxy.compaction.dialect.translation import Translator
from proxy.dialects.anthropic_messages import MESSAGES
from proxy.dialects.base import Dialect
from proxy.dialects.chat_completions import CHAT
from proxy.dialects.responses import RESPONSES
from proxy.dialects.responses_compact import RESPONSES_COMPACT

ROUTED = {d.name: d for d in (CHAT, RESPONSES, MESSAGES, RESPONSES_COMPACT)}


def declared(protocol: type) -> set[str]:
    """The members a protocol class and the protocols it extends declare."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls is object or not getattr(cls, "_is_protocol", False) or cls.__name__ == "Protocol":
            continue
        names |= set(getattr(cls, "__annotations__", {}))
        members = vars(cls).items()  # methods, and read-only members declared as properties
        names |= {
            n
            for n, v in members
            if (inspect.isfunction(v) or isinstance(v, property)) and n[0] != "_"
        }
    return names


def test_the_protocols_declare_what_compaction_reads() -> None:
    assert {"parse", "conversation", "render", "native", "recall"} <= declared(Translator)
    assert {"records", "error_body"} <= declared(Dialect) - declared(Translator)


@pytest.mark.parametrize("name", sorted(ROUTED))
def test_each_routed_dialect_provides_every_declared_member(name: str) -> None:
    dialect = ROUTED[name]
    missing = sorted(m for m in declared(Dialect) if not hasattr(dialect, m))
    assert not missing, f"{name} lacks {missing}"


def test_the_recall_shape_is_offered_where_the_dialect_has_one() -> None:
    # The compact endpoint answers one summary request: no tool is offered there.
    assert RESPONSES_COMPACT.recall is None
    for dialect in (CHAT, RESPONSES, MESSAGES):
        assert callable(dialect.recall.offer), dialect.name
