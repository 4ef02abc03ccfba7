"""Where things are: the repository, and the offline copies of tiktoken's files beside it."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TIKTOKEN_DIR = REPO_ROOT.parent / "shared" / "tiktoken"
# Names another offline folder instead of ../shared/tiktoken (a missing one: a fresh clone).
TIKTOKEN_DIR_ENV = "COMPACTION_TEST_TIKTOKEN_DIR"


def offline_folder() -> Path:
    """The folder of verified tiktoken files the tests use when it exists."""
    return Path(os.environ.get(TIKTOKEN_DIR_ENV) or TIKTOKEN_DIR)
