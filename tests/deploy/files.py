"""The deployment files the deploy tests read: where they are, and how they load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_all_yaml(path: Path) -> list[Any]:
    with path.open(encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]
