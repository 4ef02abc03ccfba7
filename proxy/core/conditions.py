"""Trigger conditions: simpleeval expressions over one message, checked at config load.

An expression sees ``message`` (the message dict as sent), ``role`` and ``text`` (its content as
plain text), and the functions ``len``, ``str``, ``int``, ``float``, ``any``, ``all``. Example:
``role == "tool" and "error" in text.lower()``. Anything else (unknown names, syntax the
evaluator does not support, several statements) is rejected when the config loads; an error while
evaluating (a missing key, a wrong type) counts as "does not match" and never fails a request.
"""

from __future__ import annotations

import ast
import logging

from simpleeval import EvalWithCompoundTypes

from proxy.core.messages import content_text
from proxy.types import MessageView

log = logging.getLogger(__name__)

_FUNCTIONS = {"len": len, "str": str, "int": int, "float": float, "any": any, "all": all}
_NAMES = frozenset({"message", "role", "text", "True", "False", "None"})


class Condition:
    """One compiled expression; ``matches(message)`` is safe to call on any message."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self._evaluator = EvalWithCompoundTypes(functions=dict(_FUNCTIONS), names={})
        self._tree = parse_expression(expression, self._evaluator, _NAMES)

    def matches(self, message: MessageView) -> bool:
        self._evaluator.names = {
            "message": message,
            "role": message.get("role"),
            "text": content_text(message.get("content")),
        }
        try:
            return bool(self._evaluator.eval(self.expression, previously_parsed=self._tree))
        except Exception as exc:  # a user's expression must never fail a request
            log.debug("condition %r did not evaluate: %s", self.expression, exc)
            return False


def parse_expression(
    expression: str, evaluator: EvalWithCompoundTypes, names: frozenset[str]
) -> ast.expr:
    """Parse and vet an expression that may use ``names`` and the evaluator's functions (also
    the pins', ``proxy.core.pins``); ValueError names what is wrong."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a valid expression: {exc.msg}") from exc
    bound = {
        n.id
        for c in ast.walk(tree)
        if isinstance(c, ast.comprehension)
        for n in ast.walk(c.target)
        if isinstance(n, ast.Name)
    }
    functions = evaluator.functions.keys()
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and type(node) not in evaluator.nodes:
            raise ValueError(f"{type(node).__name__} is not supported in expressions")
        if isinstance(node, ast.Name) and node.id not in names | functions | bound:
            usable = sorted(names - {"True", "False", "None"}) + list(functions)
            raise ValueError(f"unknown name {node.id!r}; use {', '.join(usable)}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise ValueError(f"private attribute {node.attr!r} is not allowed")
    return tree
