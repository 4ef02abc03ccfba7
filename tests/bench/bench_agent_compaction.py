"""An agent's own compaction answered from the ready summary (docs/agent-compaction.md).

Run: .venv/bin/python -m tests.bench.bench_agent_compaction [--sessions 20] [--steps 12]

Real servers on loopback: a scripted Anthropic provider, the OpenAI-compatible mock writing the
summaries, and the proxy (summarize, inline, trigger 1,200 tokens, keep 500). Each session plays
a Claude Code run of ``--steps`` user turns (two tool rounds each) through the official
``anthropic`` SDK, then sends Claude Code's summary request twice, plain and streamed, and one
``/v1/responses/compact`` after a Codex-like run of as many tool rounds (the run through the
``openai`` SDK; the compact posted as Codex posts it), and Codex's own compaction prompt on
``/v1/responses``, streamed. Printed: the time each answer took as the
client saw it (p50, p99, max in ms), how many were answered, and how many compaction requests
reached the provider (the goal: none, so zero provider tokens).
Goals (PASS/FAIL): every request answered, p50 under 50 ms, zero provider requests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(REPO.parent / "shared" / "tiktoken"))

import anthropic  # noqa: E402
import httpx  # noqa: E402
import openai  # noqa: E402

from tests.bench.bench_ahead import percentile  # noqa: E402
from tests.support.anthropic_provider import AnthropicProvider  # noqa: E402
from tests.support.claude_code import KEY, MODEL, SYSTEM, compaction_request, run_session  # noqa: E402
from tests.support.codex import MODEL as CODEX_MODEL  # noqa: E402
from tests.support.codex import codex_session, compaction_prompt  # noqa: E402
from tests.support.config import AGENT_RUN, summarizing  # noqa: E402
from tests.support.proxies import running_mock, running_proxies  # noqa: E402
from tests.support.responses_provider import INSTRUCTIONS, ResponsesProvider  # noqa: E402

POLICY = {
    **AGENT_RUN,
    "trigger": {"input_tokens": 1200, "context_fraction": 0},
    "keep": {"tokens": 500},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    timings: dict[str, list[float]] = {"plain": [], "streamed": [], "codex": [], "codex-prompt": []}
    answered = 0
    with (
        running_mock() as chat,
        running_mock() as messages,
        running_proxies() as start,
        httpx.Client() as api_http,
    ):
        codex = ResponsesProvider(chat)  # also writes the summaries
        provider = AnthropicProvider(messages)
        sections = {"upstream": {"anthropic_base_url": messages.url}}
        server = start(summarizing(chat.url, policy=POLICY, **sections))
        for n in range(args.sessions):
            sdk = anthropic.Anthropic(
                base_url=server.url,
                api_key=KEY,
                max_retries=0,
                default_headers={"X-Conversation-Id": f"bench-{n}"},
            )
            history = run_session(sdk, args.steps)
            asked = compaction_request(history)
            before = len(provider.requests())
            for mode in ("plain", "streamed"):
                started = time.perf_counter()
                raw = sdk.messages.with_raw_response.create(
                    model=MODEL,
                    max_tokens=20000,
                    system=SYSTEM,
                    messages=asked,
                    stream=mode == "streamed",
                )
                _ = raw.parse() if mode == "plain" else list(raw.parse())
                timings[mode].append((time.perf_counter() - started) * 1000)
                answered += raw.headers.get("x-compaction") == "answered"
            forwarded = len(provider.requests()) - before
            sdk.close()
            api = openai.OpenAI(
                base_url=f"{server.url}/v1",
                api_key="sk-codex",
                max_retries=0,
                default_headers={"X-Conversation-Id": f"codex-{n}"},
            )
            items = codex_session(api, args.steps)
            calls = len(chat.received)
            # Posted as Codex posts it (codex-api's CompactClient: one JSON body), not through the
            # openai SDK, whose own request building takes ~20 ms for a body of this size.
            body = json.dumps(
                {"model": CODEX_MODEL, "input": items, "instructions": INSTRUCTIONS}
            ).encode()
            headers = {
                "authorization": "Bearer sk-codex",
                "content-type": "application/json",
                "x-conversation-id": f"codex-{n}",
            }
            started = time.perf_counter()
            answer = api_http.post(
                f"{server.url}/v1/responses/compact", content=body, headers=headers
            )
            answer.json()
            timings["codex"].append((time.perf_counter() - started) * 1000)
            answered += answer.headers.get("x-compaction") == "answered"
            prompt = json.dumps(
                {
                    "model": CODEX_MODEL,
                    "instructions": INSTRUCTIONS,
                    "input": compaction_prompt(items),
                    "stream": True,
                }
            ).encode()
            started = time.perf_counter()
            answer = api_http.post(f"{server.url}/v1/responses", content=prompt, headers=headers)
            answer.read()
            timings["codex-prompt"].append((time.perf_counter() - started) * 1000)
            answered += answer.headers.get("x-compaction") == "answered"
            forwarded += len(chat.received) - calls
            api.close()
            if forwarded:
                print(f"session {n}: {forwarded} compaction requests reached the provider")
        reached = sum(
            1
            for body in provider.requests()
            if "Your task is to create" in str(body["messages"][-1])
        )
    total = 4 * args.sessions
    reached += sum(
        1
        for r in codex.mock.received
        if r.path.endswith("/compact") or b"CONTEXT CHECKPOINT COMPACTION" in r.body
    )
    ok = answered == total and reached == 0
    for mode, values in timings.items():
        p50, p99 = percentile(values, 50), percentile(values, 99)
        ok = ok and p50 < 50
        print(
            f"{mode:12} n={len(values):3}  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  max {max(values):6.2f} ms"
        )
    print(f"answered {answered}/{total}; compaction requests the provider received: {reached}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
