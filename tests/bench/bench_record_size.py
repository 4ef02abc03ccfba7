"""How many conversations a Redis of N GB holds, measured (on demand; docs/scaling.md quotes it).

Builds realistic records with the proxy's own code (``Checkpoint``, ``Record``, ``encode_record``,
``Sealer``, ``Tenancy`` keys), stores them with a TTL in a private redis-server exactly as the
store does (one string per conversation), and reads ``MEMORY USAGE`` per key plus the growth of
``used_memory`` over many keys (which includes Redis' per-key overhead: dict entry, expiry).

    .venv/bin/python -m tests.bench.bench_record_size [--conversations 2000]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
from pathlib import Path

import redis
import tiktoken

from proxy.core.checkpoints import Checkpoint, Record, encode_record
from proxy.state.sealing import Sealer
from proxy.state.tenancy import Tenancy
from tests.support.paths import TIKTOKEN_DIR
from tests.support.redis_server import RedisServer

TTL_MS = 7 * 24 * 3600 * 1000
GB = 1024**3
# Words of a coding-agent summary: file names, decisions, numbers, ordinary English.
SUMMARY_PROSE = (
    "the user asked to refactor module proxy/state/store/redis.py so that compare-and-set uses a Lua "
    "script; we decided to keep the breaker at three failures and a one second cooldown; tests "
    "in tests/store pass except test_failover which times out after 250 ms; open questions: "
    "whether Sentinel discovery should retry, how to rotate encryption keys, and which TTL to "
    "use for locks; next step: run the benchmark, compare p99 latency 0.41 ms vs 0.57 ms, then "
    "update docs/scaling.md and the Helm values; the assistant called read_file, run_tests, "
    "apply_patch and git_diff; errors: KeyError 'choices' in summarizer.py line 212 fixed by "
    "checking the response shape; constraints: Python 3.11, no new dependencies, keep the API"
)
WORDS = SUMMARY_PROSE.split(" ")


def summary_text(tokens: int, encoding: tiktoken.Encoding, rng: random.Random) -> str:
    """About ``tokens`` tokens of summary-like prose, deterministic for a seed."""
    words: list[str] = []
    text = ""
    while len(encoding.encode(text)) < tokens:
        words += rng.sample(WORDS, 20)
        text = " ".join(words)
    while len(encoding.encode(text)) > tokens:
        words.pop()
        text = " ".join(words)
    return "<agent_summary>\n" + text + "\n</agent_summary>"


def build_record(
    n: int, *, checkpoints: int, summary_tokens: int, encoding: tiktoken.Encoding, owner: str
) -> Record:
    rng = random.Random(n)
    messages = [{"role": "user", "content": f"message {i} of conversation {n}"} for i in range(400)]
    chain: list[Checkpoint] = []
    parent = None
    for depth in range(checkpoints):
        cp = Checkpoint.create(
            messages,
            covered=40 * (depth + 1),
            summary=summary_text(summary_tokens, encoding, rng),
            parent_id=parent,
            summary_tokens=summary_tokens,
            model="gpt-4o-mini",
            created_at=1_760_000_000.0 + depth,
        )
        parent = cp.id
        chain.insert(0, cp)  # newest first, as the store keeps them
    return Record(
        owner=owner, checkpoints=tuple(chain), conversation_id=f"conv-{n}", updated_at=1.7e9
    )


def measure(
    client: redis.Redis,
    *,
    conversations: int,
    checkpoints: int,
    summary_tokens: int,
    sealer: Sealer,
    tenancy: Tenancy,
    encoding: tiktoken.Encoding,
) -> dict[str, float]:
    client.flushall()
    base = client.info("memory")["used_memory"]
    tenant = tenancy.tenant("sk-bench")
    value_sizes, usages = [], []
    # A few distinct records encoded for real, reused under distinct keys: building 2000 records
    # with tokenizer-calibrated summaries would measure the tokenizer, not Redis.
    samples = []
    for n in range(20):
        conversation_id = f"conv-{n}"
        record = build_record(
            n,
            checkpoints=checkpoints,
            summary_tokens=summary_tokens,
            encoding=encoding,
            owner=tenancy.owner(tenant, conversation_id),
        )
        samples.append(encode_record(record))
    pipe = client.pipeline(transaction=False)
    keys = []
    for n in range(conversations):
        key = tenancy.record_key(tenant, f"conv-{n}")
        value = sealer.seal(samples[n % len(samples)], context=key.encode())
        value_sizes.append(len(value))
        pipe.set(key, value, px=TTL_MS)
        keys.append(key)
    pipe.execute()
    for key in keys[:200]:
        usages.append(client.memory_usage(key, samples=0))
    grown = client.info("memory")["used_memory"] - base
    per_conversation = grown / conversations
    return {
        "value_bytes": statistics.mean(value_sizes),
        "memory_usage": statistics.mean(usages),
        "used_memory_per_key": per_conversation,
        "per_gb": GB / per_conversation,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=2000)
    args = parser.parse_args()
    if TIKTOKEN_DIR.is_dir():  # the offline copies beside the repo, as in the tests
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_DIR))
    encoding = tiktoken.get_encoding("o200k_base")
    tenancy = Tenancy(b"bench-secret-0123456789abcdef")
    sealers = {"json": Sealer(), "sealed": Sealer([("k1", os.urandom(32))])}
    print(f"{'record':<34}{'value B':>10}{'MEMORY USAGE':>14}{'used/key B':>12}{'conv/GB':>10}")
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        try:
            for checkpoints, summary_tokens in ((1, 1024), (8, 256), (8, 1024)):
                for name, sealer in sealers.items():
                    row = measure(
                        client,
                        conversations=args.conversations,
                        checkpoints=checkpoints,
                        summary_tokens=summary_tokens,
                        sealer=sealer,
                        tenancy=tenancy,
                        encoding=encoding,
                    )
                    label = f"{checkpoints} cp x {summary_tokens} tok, {name}"
                    print(
                        f"{label:<34}{row['value_bytes']:>10.0f}{row['memory_usage']:>14.0f}"
                        f"{row['used_memory_per_key']:>12.0f}{row['per_gb']:>10.0f}"
                    )
            version = client.info("server")["redis_version"]
        finally:
            client.close()
    print(f"redis {version}; {args.conversations} conversations per row; GB = 2**30 bytes")
    print(f"({Path(__file__).name}: one string per conversation, TTL set, as the store writes)")


if __name__ == "__main__":
    main()
