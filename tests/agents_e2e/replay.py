"""A recorded agent session sent again, request by request, through a fresh proxy (the run's
policy) to the strict provider: what the default suite checks without the agents.

Between requests the proxy is let settle (its answer counted, no summary queued or running), so
an ahead-of-time summary lands where it would have landed between an agent's turns, and the
outcome does not hang on the machine's speed. ``flip_stream`` sends each request with the other
``stream`` value, so the same history goes through the proxy's other answer path.
"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx

from tests.agents_e2e.figures import Figures, measure
from tests.agents_e2e.recording import Record
from tests.agents_e2e.session import policy, recorded_proxy, strict_provider

DUMMY_AUTH = {"authorization": "Bearer dummy-e2e-key", "x-api-key": "dummy-e2e-key"}
_ANSWERED = re.compile(r'^proxy_requests_total\{route="[^"]+",status="\d+"\} (\S+)$', re.M)
_IDLE = "\nproxy_background_queue_depth 0.0\n"


def _settle(client: httpx.Client, answered: int, *, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = client.get("/metrics").text
        counted = sum(float(v) for v in _ANSWERED.findall(metrics))
        if counted >= answered and _IDLE in metrics:
            return
        time.sleep(0.02)
    raise AssertionError(f"the proxy did not settle within {timeout} s")


def _body(request: dict[str, Any], flip_stream: bool) -> dict[str, Any]:
    body = dict(request["body"])
    if flip_stream:
        body["stream"] = not body.get("stream", False)
        if not body["stream"]:
            body.pop("stream_options", None)  # allowed only on a streamed chat completion
    return body


def replay(session: dict[str, Any], *, flip_stream: bool = False) -> tuple[Figures, list[Record]]:
    recipe = policy(session["trigger_tokens"], session["keep_tokens"])
    with (
        strict_provider() as servers,
        recorded_proxy(servers.provider_url, recipe) as (url, recording),
    ):
        with httpx.Client(base_url=url, timeout=60) as client:
            for n, request in enumerate(session["requests"], 1):
                headers = {**request["headers"], **DUMMY_AUTH}
                headers.pop("content-encoding", None)
                client.request(
                    request["method"],
                    request["path"],
                    json=_body(request, flip_stream),
                    headers=headers,
                ).read()
                _settle(client, n)
        records = [r for r in recording.records if r.compacted_route]
        return measure(records, list(servers.provider.seen)), records
