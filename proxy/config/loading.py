"""Reading a YAML settings file: ``${ENV}`` references, and errors that name the key and line.

Generic over the settings model: ``proxy.config.settings`` gives it the root ``Settings``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from proxy.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def _expand_env(value: Any, environ: Mapping[str, str], path: str = "") -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{path or '<root>'}: environment variable {name} is not set")

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {
            k: _expand_env(v, environ, f"{path}.{k}" if path else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_expand_env(v, environ, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _line_index(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path of a YAML document to its 1-based line, for error messages."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(key.value))
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, str(i)))

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def _format_errors(exc: ValidationError, lines: dict[tuple[str, ...], int], source: str) -> str:
    out = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        key = ".".join(loc) or "<root>"
        where = ""
        for n in range(len(loc), -1, -1):
            if loc[:n] in lines:
                where = f" ({source}, line {lines[loc[:n]]})"
                break
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        out.append(f"{key}{where}: {msg}")
    return "invalid configuration:\n  " + "\n  ".join(out)


def read_yaml(text: str, *, source: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The document's top-level mapping with ``${NAME}`` and ``${NAME:-default}`` references
    replaced from ``environ``; ConfigError for invalid YAML or a top level of another kind."""
    try:
        raw = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    expanded: dict[str, Any] = _expand_env(raw, environ)  # a mapping expands to a mapping
    return expanded


def validate(model: type[M], data: dict[str, Any], *, text: str, source: str) -> M:
    """``data`` as ``model``; a ConfigError names each bad key's path and its line in ``text``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, _line_index(text), source)) from exc
