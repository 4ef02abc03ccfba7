"""``make e2e-agents``: the real coding agents, unmodified, through the proxy.

For each agent installed under ``.e2e-agents/`` (see the Makefile target): a fresh scratch copy
of a small project, a fresh proxy (the coding-agent recipe at the agent's low token trigger)
behind a recorder, in front of the strict scripted provider; the agent is started on the task
and the provider drives it through forty rounds of shell commands. Then its figures are printed
and, with ``--record``, its requests are saved as a fixture that the default suite replays
(tests/agents_e2e/test_replay.py).

    python -m tests.agents_e2e.harness [--agents claude-code,codex] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.agents_e2e import fixtures
from tests.agents_e2e.drivers import DRIVERS
from tests.agents_e2e.drivers.base import AGENTS, Driver, base_env
from tests.agents_e2e.figures import measure
from tests.agents_e2e.recording import Record
from tests.agents_e2e.script import TASK
from tests.agents_e2e.session import (
    Servers,
    policy,
    recorded_proxy,
    scratch_project,
    strict_provider,
)
from tests.support.paths import offline_folder

TIMEOUT = 900  # seconds one agent may take for the whole session
KEEP_LOG = 4000  # the last characters of an agent's output shown when it fails


def run_agent(driver: Driver, servers: Servers, *, record: bool, missing: str) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"e2e-{driver.name}-"))
    home = work / "home"
    (home / "tmp").mkdir(parents=True)
    project = scratch_project(work / "project")
    env = base_env(home)
    version = driver.version(env)
    recipe = policy(driver.trigger_tokens, driver.keep_tokens)
    first_seen = len(servers.provider.seen)
    with recorded_proxy(servers.provider_url, recipe, missing=missing) as (proxy_url, recording):
        launch = driver.launch(proxy_url, home, TASK)
        log = AGENTS / "logs" / f"{driver.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            done = subprocess.run(
                launch.argv,
                cwd=project,
                env={**env, **launch.env},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
            exit_code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            exit_code, output = (
                -1,
                f"timed out after {TIMEOUT}s\n{exc.stdout or ''}{exc.stderr or ''}",
            )
        seconds = time.monotonic() - started
        log.write_text(output if isinstance(output, str) else output.decode(errors="replace"))
        time.sleep(2)  # a summary made ahead after the last answer lands in the provider's log
        records = list(recording.records)
    seen = servers.provider.seen[first_seen:]
    dump = AGENTS / "records" / f"{driver.name}.json"
    dump.parent.mkdir(parents=True, exist_ok=True)
    dump.write_text(
        json.dumps([r.__dict__ for r in records] + [s.__dict__ for s in seen], indent=1)
    )
    figures = measure(records, seen)
    tests_pass = "a + b" in (project / "calc.py").read_text()
    result = {
        "agent": driver.name,
        "version": version,
        "exit_code": exit_code,
        "seconds": round(seconds),
        "edit_made": tests_pass,
        "figures": figures.__dict__,
        "problems": sorted({p for s in seen for p in s.problems})[:10],
        "proxy_errors": [r.status for r in records if r.status >= 400],
    }
    models = sorted(
        {
            str(r.body.get("model"))
            for r in records
            if r.compacted_route and isinstance(r.body, dict)
        }
    )
    result["models"] = models
    print(
        f"{driver.name} {version} ({', '.join(models)}): exit {exit_code} in {seconds:.0f}s, edit made: {tests_pass}"
    )
    print("  " + figures.line())
    others = sorted({f"{r.method} {r.path} {r.status}" for r in records if not r.compacted_route})
    result["other_requests"] = others
    if others:
        print("  other requests: " + ", ".join(others))
    for problem in result["problems"]:
        print(f"  provider refused: {problem[:300]}")
    if exit_code != 0:
        print("  agent output (end): " + output[-KEEP_LOG:].replace("\n", "\n    "))
    if record:
        size = save_fixture(driver, version, records, missing=missing)
        print(f"  fixture: tests/fixtures/agents/{driver.name}.json.gz ({size} bytes)")
    return result


def save_fixture(driver: Driver, version: str, records: list[Record], *, missing: str) -> int:
    requests = [
        {"method": r.method, "path": r.path, "headers": r.headers, "body": r.body}
        for r in records
        if r.compacted_route
    ]
    session = {
        "agent": driver.name,
        "version": version,
        "trigger_tokens": driver.trigger_tokens,
        "keep_tokens": driver.keep_tokens,
        "recorded_with": {"conversation.missing": missing},
        "requests": requests,
    }
    return fixtures.save(fixtures.FOLDER / f"{driver.name}.json.gz", session)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default=",".join(DRIVERS), help="comma-separated agent names")
    parser.add_argument("--record", action="store_true", help="save the sessions as fixtures")
    parser.add_argument(
        "--missing",
        default="auto",
        choices=("auto", "passthrough"),
        help="conversation.missing of the proxy: passthrough records a session uncompacted",
    )
    args = parser.parse_args(argv)
    if offline_folder().is_dir():  # the verified tiktoken files, as the tests use them
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(offline_folder()))
    results = []
    with strict_provider() as servers:
        for name in args.agents.split(","):
            driver = DRIVERS[name]
            if not driver.installed():
                print(f"{name}: not installed under {AGENTS} (run `make e2e-agents`)")
                results.append({"agent": name, "error": "not installed"})
                continue
            results.append(run_agent(driver, servers, record=args.record, missing=args.missing))
    (AGENTS / "results.json").write_text(json.dumps(results, indent=2))
    failed = [
        r["agent"]
        for r in results
        if r.get("error")
        or r["exit_code"] != 0
        or any(r["figures"][k] for k in ("broken_histories", "proxy_4xx", "proxy_5xx"))
    ]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
