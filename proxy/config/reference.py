"""The configuration reference, rendered from the settings models, so it cannot drift from them.

    python -m proxy.config.reference > docs/configuration.md

Every key path, its type (with bounds), its default and its description come from the root
``proxy.config.settings.Settings`` and its sections; a test compares docs/configuration.md with
a fresh render.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from proxy.config.models import DEFAULT_MODELS
from proxy.config.settings import CONFIG_PATH_ENV, UPSTREAM_KEY_ENV, UPSTREAM_URL_ENV, Settings

REGENERATE = "python -m proxy.config.reference > docs/configuration.md"

_INTRO = f"""# Configuration reference

<!-- Generated from proxy/config/settings.py by `{REGENERATE}`; do not edit by hand. -->

The proxy reads one YAML file: `compaction-proxy serve --config FILE`, or the file named by
`${CONFIG_PATH_ENV}`; without either, every key takes its default. `compaction-proxy check-config
FILE` validates a file and prints the effective settings (secrets masked); an error names the key
path and the line. `config/proxy.yaml` lists every key at its default, and `config/examples/`
holds commented setups (see [policies.md](policies.md)).

- Any string value may reference the environment: `${{NAME}}` (an error when `NAME` is unset) or
  `${{NAME:-default}}`.
- `${UPSTREAM_URL_ENV}` and `${UPSTREAM_KEY_ENV}`, when set, override `upstream.base_url` and
  `upstream.api_key`.
- Unknown keys are errors, so a typo never silently falls back to a default.
- `<name>` and `<glob>` stand for a key you choose (a policy's name, a model glob); `[]` for a list item.
"""


def render() -> str:
    """docs/configuration.md as Markdown."""
    defaults = Settings()
    out = [_INTRO]
    for name, field in Settings.model_fields.items():
        out += [f"## `{name}`", "", field.description or "", ""]
        rows = list(_rows(name, field, getattr(defaults, name), top=True))
        out += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        out += [f"| `{path}` | {kind} | {default} | {text} |" for path, kind, default, text in rows]
        out.append("")
        if name == "models":
            out += _builtin_models()
    return "\n".join(out).rstrip() + "\n"


Row = tuple[str, str, str, str]
_PLACEHOLDERS = {"models": "<glob>", "pricing.models": "<glob>"}


def _rows(path: str, field: FieldInfo, default: Any, *, top: bool = False) -> Iterator[Row]:
    annotation = field.annotation
    model = _model(annotation)
    if model is not None:  # a nested section: its keys, with the section's own defaults
        if not top:
            yield path, "mapping", "—", _cell(field.description or "")
        yield from _model_rows(path, model, default)
        return
    origin, args = get_origin(annotation), get_args(annotation)
    item = _model(args[-1] if origin is dict else args[0]) if args else None
    if not top or item is None:
        yield path, _type(annotation, field), _default(field, default), _cell(field.description)
    if item is not None:  # a map or list of sections, or an optional one: the keys of one entry
        if origin is dict:
            entry = f"{path}.{_PLACEHOLDERS.get(path, '<name>')}"
        else:
            entry = path if origin in (Union, types.UnionType) else f"{path}[]"
        yield from _model_rows(entry, item, None)


def _model_rows(path: str, model: type[BaseModel], instance: Any) -> Iterator[Row]:
    if isinstance(instance, dict):  # policies: what an entry gets by default
        instance = instance.get("default")
    if instance is None:
        instance = _try_default(model)
    for name, field in model.model_fields.items():
        default = getattr(instance, name) if instance is not None else _field_default(field)
        yield from _rows(f"{path}.{field.alias or name}", field, default)


def _try_default(model: type[BaseModel]) -> BaseModel | None:
    if any(f.is_required() for f in model.model_fields.values()):
        return None
    return model()


def _field_default(field: FieldInfo) -> Any:
    return None if field.is_required() else field.get_default(call_default_factory=True)


def _model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _type(annotation: Any, field: FieldInfo | None = None) -> str:
    text = _type_name(annotation)
    if field is not None:
        bounds = [_bound(m) for m in field.metadata]
        text = ", ".join([text, *(b for b in bounds if b)])
    return _cell(text)


def _type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        named = [_type_name(a) for a in args if a is not type(None)]
        suffix = " or null" if type(None) in args else ""
        return " or ".join(named) + suffix
    if origin is tuple:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}"
    if _model(annotation) is not None:
        return "mapping"
    names = {int: "integer", float: "number", str: "string", bool: "boolean", SecretStr: "secret"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bound(metadata: object) -> str:
    for kind, attribute, sign in (
        (annotated_types.Ge, "ge", ">="),
        (annotated_types.Gt, "gt", ">"),
        (annotated_types.Le, "le", "<="),
        (annotated_types.Lt, "lt", "<"),
    ):
        if isinstance(metadata, kind):
            return f"{sign} {getattr(metadata, attribute)}"
    return ""


def _default(field: FieldInfo, value: Any) -> str:
    if field.is_required():
        return "required"
    return f"`{_cell(_yaml(value))}`"


def _yaml(value: Any) -> str:
    """A default as it would be written in YAML flow style."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, BaseModel):
        return "{...}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _builtin_models() -> list[str]:
    out = [
        "Built-in model table, checked after `models` (the first matching glob wins):",
        "",
        "| glob | context_window | encoding |",
        "| --- | --- | --- |",
    ]
    for glob, info in DEFAULT_MODELS.items():
        out.append(f"| `{glob}` | {info.context_window} | `{info.encoding}` |")
    return [*out, ""]


if __name__ == "__main__":
    print(render(), end="")
