"""One driver per agent: how it is installed, configured against the proxy with fake
credentials and telemetry off, and started for the scripted session. ``DRIVERS`` lists them."""

from __future__ import annotations

from tests.agents_e2e.drivers.base import Driver
from tests.agents_e2e.drivers.claude import CLAUDE, CLAUDE_SONNET
from tests.agents_e2e.drivers.codex import CODEX
from tests.agents_e2e.drivers.mini import MINI
from tests.agents_e2e.drivers.opencode import OPENCODE

DRIVERS: dict[str, Driver] = {d.name: d for d in (CLAUDE, CLAUDE_SONNET, CODEX, OPENCODE, MINI)}
