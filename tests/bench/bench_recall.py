"""What recall costs: time to first byte of streamed plain-text replies, and the
proxy's own time per recall round.

Run: .venv/bin/python -m tests.bench.bench_recall [--requests 200]

1. TTFB: real servers on loopback (the mock provider, two proxies that differ only in
   ``recall.enabled``), one conversation whose old tool result is cleared, so every request with
   recall on carries a handle and goes out with the tool, and its streamed reply is held until its
   first text. The provider pauses 20 ms after the opening event, as a model does before its
   first token. TTFB = request sent -> first content delta read by the official client; the
   medians and p95 of both proxies, measured alternately in the same run, and their ratio.
2. Proxy time per recall round: in process, what the forwarder does for one round besides the
   provider's round trip (read the recall call, answer it from the request's originals, build and
   encode the re-ask) on a 200-message history; the median of ``--requests`` rounds.
   Goal: < 2 ms.
3. Proxy time per recall round after text: in process, a stream that shows 200 text chunks and
   then calls recall, spliced with the re-ask's 200 chunks, against 400 text chunks relayed with
   nothing to splice; the difference of the medians. Goal: < 2 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from proxy import wirejson
from proxy.compaction.dialect.recall import Answered, ToolCall
from proxy.compaction.recall.covered import Piece
from proxy.compaction.recall.tool import Recall, RecallSession
from proxy.config.recall import RecallSettings
from proxy.core.tokens import TokenCounter
from proxy.dialects.chat_recall import CHAT_RECALL
from proxy.events import Listeners
from proxy.proxying.recall.asker import Asker
from proxy.proxying.recall.stream import RecallStream
from proxy.proxying.responses import BufferedResponse
from proxy.upstream.content_coding import Decoder
from tests.support.clients import openai_client
from tests.support.config import summarizing
from tests.support.mock_upstream import sse_chunks, sse_reply
from tests.support.provider import SYSTEM, take_turn
from tests.support.proxies import running_mock, running_proxies
from tests.support.recall_provider import CLEARING, RecallProvider

BIG = "\n" + "a line of a file the agent read\n" * 80


def _ttfb(client, history) -> float:
    started = time.perf_counter()
    with client.chat.completions.create(model="gpt-4o", messages=history, stream=True) as s:
        for chunk in s:
            if chunk.choices and chunk.choices[0].delta.content:
                return (time.perf_counter() - started) * 1000
    raise RuntimeError("no text")


def bench_ttfb(requests: int) -> None:
    with running_mock() as mock, running_proxies() as start:
        RecallProvider(mock)
        on = start(summarizing(mock.url, policy=CLEARING))
        off = start(summarizing(mock.url, policy=CLEARING, recall={"enabled": False}))
        clients = {
            "recall on": openai_client(on, "bench"),
            "recall off": openai_client(off, "bench"),
        }
        histories = {}
        for name, client in clients.items():
            history = [SYSTEM]
            take_turn(client, history, "Step 0 TOOL", tool_output=BIG)
            for turn in range(1, 4):
                take_turn(client, history, f"Question {turn}?")
            histories[name] = [*history, {"role": "user", "content": "Question 9?"}]
        times: dict[str, list[float]] = {name: [] for name in clients}
        for _ in range(requests):
            for name, client in clients.items():
                chunks = sse_chunks(["first", " words"])
                mock.push(sse_reply([chunks[0], 0.02, *chunks[1:]]))
                times[name].append(_ttfb(client, histories[name]))
        last = mock.chat_requests()[-2].json()
        assert any(t["function"]["name"] == "context_recall" for t in last.get("tools", []))
    for name, values in times.items():
        values.sort()
        p95 = values[int(len(values) * 0.95) - 1]
        print(f"TTFB {name:>10}: median {statistics.median(values):6.2f} ms  p95 {p95:6.2f} ms")
    ratio = statistics.median(times["recall on"]) / statistics.median(times["recall off"])
    print(f"TTFB ratio recall on / off (median): {ratio:.3f}")


def _session() -> tuple[RecallSession, bytes]:
    """A recall session over one kept original, and a 200-message streamed request."""
    history = [SYSTEM]
    for n in range(100):
        history.append({"role": "user", "content": f"question {n} " + "words " * 40})
        history.append({"role": "assistant", "content": f"answer {n} " + "words " * 60})
    sent = wirejson.encode({"model": "gpt-4o", "messages": history, "stream": True})
    original = "a line of a file the agent read\n" * 400

    class Conv:
        tenant, conversation_id, route = "t", "c", "chat"

    recall = Recall(
        RecallSettings(),
        originals=None,
        tenancy=None,
        listeners=Listeners(),
        counter=TokenCounter(),
    )  # type: ignore[arg-type]
    session = RecallSession(
        recall, Conv(), CHAT_RECALL, {"rabc": Piece("rabc", "x", original)}, plan=None
    )  # type: ignore[arg-type]
    return session, sent


def bench_round(requests: int) -> None:
    session, sent = _session()
    call = ToolCall("call_1", "context_recall", json.dumps({"id": "rabc", "query": "file"}))
    reply_bytes = json.dumps(
        {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "context_recall", "arguments": call.arguments},
                            }
                        ],
                    }
                }
            ]
        }
    ).encode()

    async def one() -> float:
        started = time.perf_counter()
        reply = CHAT_RECALL.read(reply_bytes)
        assert reply is not None
        answers = {c.id: await session.answer(c) for c in reply.calls}
        body = CHAT_RECALL.ask_again(
            wirejson.parse(sent), Answered(reply, answers, "context_recall", last=False)
        )
        wirejson.encode(body)
        return (time.perf_counter() - started) * 1000

    async def run() -> list[float]:
        return [await one() for _ in range(requests)]

    values = sorted(asyncio.run(run()))
    median = statistics.median(values)
    print(
        f"proxy time per recall round ({len(sent):,}-byte request): median {median:.3f} ms, "
        f"p95 {values[int(len(values) * 0.95) - 1]:.3f} ms -> {'PASS' if median < 2 else 'FAIL'} (< 2 ms)"
    )


def bench_splice(requests: int) -> None:
    """In process: a streamed reply of 200 text chunks that then calls recall, spliced with a
    re-ask answer of 200 text chunks (``RecallStream``), against the same 400 text chunks relayed
    with nothing to splice; the provider answers at once. The difference is the proxy's time
    for a recall round after text."""
    session, sent = _session()

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        body = {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    text = [chunk({"role": "assistant", "content": ""})]
    text += [chunk({"content": f"word {n} "}) for n in range(200)]
    args = json.dumps({"id": "rabc", "query": "file"})
    call = {"index": 0, "id": "call_1", "type": "function"}
    recall = [
        chunk({"tool_calls": [{**call, "function": {"name": "context_recall", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]
    end = [chunk({}, "stop"), b"data: [DONE]\n\n"]
    headers = [(b"content-type", b"text/event-stream")]

    async def relay(first: list[bytes], answer: list[bytes]) -> float:
        async def send(body: bytes) -> BufferedResponse:
            return BufferedResponse(200, headers, b"".join(answer))

        async def chunks():
            for c in first:
                yield c

        stream = RecallStream(
            BufferedResponse(200, headers, b""),
            head=[],
            rest=b"",
            chunks=chunks(),
            decoder=Decoder.of(headers),
            asker=Asker(session, sent, send),
        )
        started = time.perf_counter()
        out = b"".join([c async for c in stream.iter_raw()])
        took = (time.perf_counter() - started) * 1000
        assert b"context_recall" not in out and out.count(b"word ") == 400
        return took

    async def run() -> tuple[list[float], list[float]]:
        plain, spliced = [], []
        for _ in range(requests):
            plain.append(await relay(text + text[1:] + end, []))
            spliced.append(await relay(text + recall, text + end))
        return plain, spliced

    plain, spliced = asyncio.run(run())
    extra = statistics.median(spliced) - statistics.median(plain)
    print(
        f"splice after text (400 text chunks relayed): plain {statistics.median(plain):.3f} ms, "
        f"spliced {statistics.median(spliced):.3f} ms, proxy time of the round {extra:.3f} ms "
        f"-> {'PASS' if extra < 2 else 'FAIL'} (< 2 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    bench_round(args.requests)
    bench_splice(args.requests)
    bench_ttfb(args.requests)


if __name__ == "__main__":
    main()
