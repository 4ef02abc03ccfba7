"""Scoring: the normalised match and the judge's verdict line."""

from __future__ import annotations

import pytest

from proxy.tools.evaluation.scoring import matches, parse_judgement


@pytest.mark.parametrize(
    ("answer", "reply", "expected"),
    [
        ("src/payments/retry_74x.py", "It created `src/payments/retry_74x.py`.", True),
        ("PAY-4869", "the ticket is pay 4869", True),
        ("Juniper", "The JUNIPER fixtures.", True),
        ("Café", "cafe", True),
        ("4.5", "about 4.5 degrees", True),
        ("4.5", "about 14.5 degrees", False),  # whole words only
        ("7862", "78620 euros", False),
        ("Juniper", "I don't know.", False),
        ("", "anything", False),
    ],
)
def test_matches(answer: str, reply: str, expected: bool) -> None:
    assert matches(answer, reply) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("It says Postgres.\nSCORE: 1", True),
        ("score: 0", False),
        ("SCORE: 1 at first, but no.\nSCORE: 0", False),  # the last line counts
        ("I think it is right.", None),
    ],
)
def test_parse_judgement(text: str, expected: bool | None) -> None:
    assert parse_judgement(text) is expected
