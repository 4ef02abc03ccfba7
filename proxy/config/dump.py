"""The effective settings as plain data for ``check-config``, secrets masked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SecretStr


def masked_dump(settings: BaseModel) -> dict[str, Any]:
    """The effective settings as plain data, secrets shown as '***'."""

    def mask(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return "***"
        if isinstance(value, BaseModel):
            return masked_dump(value)
        if isinstance(value, dict):
            return {k: mask(v) for k, v in value.items()}
        if isinstance(value, tuple | list):
            return [mask(v) for v in value]
        return value

    fields = type(settings).model_fields
    return {f.alias or k: mask(getattr(settings, k)) for k, f in fields.items()}
