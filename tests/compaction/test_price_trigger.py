"""The price trigger ("Decide by price"), in process: one ``Compactor.decide`` per
turn of a growing conversation, the proxy's clock set by the test, the decision read from what
would be sent and from ``X-Compaction``.

What a user notices: under a priced model the default policy compacts a long conversation well
before the window forces it, once a summary pays for itself over the turns to come; a cold cache
(the conversation idle past the cache's TTL) is the moment it pays soonest; an unpriced model is
decided at ``pricing.reference``; ``pays: false``, a prompt under ``pays_from_tokens`` or an
unpriced model without a reference leave it to the token thresholds.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from proxy import wirejson
from proxy.compaction.compactor import Compactor
from proxy.compaction.decision import Decision, Incoming
from proxy.compaction.money.paying import _summary_reads
from proxy.core.facts import FactCache
from proxy.core.plan import PriorSummary
from proxy.core.planner import plan
from proxy.core.policy import KeepSettings, PolicySettings, TriggerSettings
from proxy.core.tokens import TokenCounter
from proxy.dialects.chat_completions import CHAT
from proxy.events import Listeners
from proxy.types import HeaderView
from tests.compaction.test_decide import Body
from tests.compaction.test_decide import compactor as shared_compactor
from tests.core.test_carried import _histories

# gpt-4.1's prices, a window the conversation never nears: only the price trigger can fire.
CONFIG = """
models: {{"priced-model": {{context_window: 1000000, encoding: o200k_base}}}}
pricing:
  models:
    "priced-model": {{input: 2.0, cached_input: 0.5, output: 8.0}}
    "twin-model": {{input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 15.0}}
  reference: {reference}
summarizer: {{model: priced-model, max_summary_tokens: 256}}
policies:
  default:
    mode: inline
    keep: {{interactions: 1}}
    trigger: {{pays: {pays}, pays_from_tokens: 2000}}
"""
# The default reference's prices: the twin-model's.
SONNET = "{input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 15.0}"


def config_with(pays: str = "true", reference: str = SONNET) -> str:
    return CONFIG.format(pays=pays, reference=reference)


MINUTE = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def compactor(yaml_text: str, clock: Clock) -> Compactor:
    return shared_compactor(yaml_text, Listeners(), clock=clock)[0]


def turns(count: int, *, model: str = "priced-model") -> bytes:
    """A conversation of ``count`` interactions of about 1,000 tokens each."""
    messages = [{"role": "system", "content": "You help."}]
    for i in range(count):
        messages += [
            {"role": "user", "content": f"question {i}: " + "why is that so " * 120},
            {"role": "assistant", "content": f"answer {i}: " + "because it is " * 120},
        ]
    return wirejson.encode({"model": model, "messages": messages})


async def answered(made: Compactor, decision: Decision) -> None:
    """The provider answers (no usage stated) and the books are written, as they are long
    before a client's next turn."""
    assert decision.follow_up is not None
    decision.follow_up.observe(200, [], b"{}")
    await made.join()


async def play(made: Compactor, clock: Clock, bodies: list[bytes], gaps: list[float]) -> list[str]:
    """Each body as one request of conversation c1, ``gaps[i]`` seconds after the previous one;
    the X-Compaction outcome of each."""
    outcomes = []
    view = HeaderView.of([(b"x-conversation-id", b"c1")])
    for raw, gap in zip(bodies, gaps, strict=True):
        clock.now += gap
        decision = await made.decide(Incoming(view, Body(raw), CHAT, {}, False))
        outcomes.append(dict(decision.response_headers)[b"x-compaction"].decode())
        await answered(made, decision)
    return outcomes


def test_a_long_conversation_is_compacted_once_a_summary_pays(tiktoken_files: object) -> None:
    clock = Clock()
    bodies = [turns(n) for n in range(2, 14)]
    gaps = [MINUTE] * len(bodies)
    priced = asyncio.run(play(compactor(config_with(), clock), clock, bodies, gaps))
    thresholds = asyncio.run(play(compactor(config_with("false"), Clock()), clock, bodies, gaps))

    assert "applied" in priced, priced
    first = priced.index("applied")
    assert first >= 3  # not before the pace is known: two growing turns seen first
    assert set(priced[first:]) == {"applied"}  # and compacted from then on
    assert set(thresholds) == {"skipped"}  # the window alone would never have fired


def test_an_unpriced_model_is_decided_at_the_reference_prices(tiktoken_files: object) -> None:
    """A model without a price is decided at ``pricing.reference``: compacted as a model with
    those prices is; with no reference, left to the token thresholds. (At Sonnet's prices a
    cut pays once it is worth more than waiting for a larger one: a longer conversation.)"""
    bodies = [turns(n, model="some-unpriced-model") for n in range(2, 24)]
    twin = [turns(n, model="twin-model") for n in range(2, 24)]
    gaps = [MINUTE] * len(bodies)

    def outcomes(config: str, sent: list[bytes]) -> list[str]:
        clock = Clock()
        return asyncio.run(play(compactor(config, clock), clock, sent, gaps))

    assert outcomes(config_with(), bodies) == outcomes(config_with(), twin)
    assert "applied" in outcomes(config_with(), bodies)
    assert set(outcomes(config_with(reference="null"), bodies)) == {"skipped"}


def test_a_cold_cache_is_the_moment_compacting_pays(tiktoken_files: object) -> None:
    """Three turns seen: with a warm cache a summary would take longer to pay back than the
    conversation can be expected to last; after an idle pause past the cache's TTL the prompt is
    written in full either way, and the same request is compacted."""
    # Four interactions and more: the compacted prompt also carries the recall tool it brings in.
    bodies = [turns(n) for n in range(4, 8)]
    warm_clock, cold_clock = Clock(), Clock()
    warm = asyncio.run(play(compactor(config_with(), warm_clock), warm_clock, bodies, [MINUTE] * 4))
    cold = asyncio.run(
        play(
            compactor(config_with(), cold_clock),
            cold_clock,
            bodies,
            [MINUTE, MINUTE, MINUTE, 10 * MINUTE],
        )
    )
    assert warm[3] == "skipped", warm
    assert cold[3] == "applied", cold
    assert warm[:3] == cold[:3]


def test_the_price_is_weighed_again_after_each_compaction(tiktoken_files: object) -> None:
    """A conversation that goes on long after its first compaction: as the prompt grows back
    from the summary, compacting again pays (the applied summary is the new base), so what is
    sent stays a fraction of the history instead of growing with it."""
    clock = Clock()
    made = compactor(config_with(), clock)
    view = HeaderView.of([(b"x-conversation-id", b"c1")])

    async def sent_sizes() -> list[tuple[str, int]]:
        sizes = []
        for n in range(2, 41):
            clock.now += MINUTE
            decision = await made.decide(Incoming(view, Body(turns(n)), CHAT, {}, False))
            assert decision.body is not None
            sent = wirejson.parse(decision.body)["messages"]
            sizes.append((dict(decision.response_headers)[b"x-compaction"].decode(), len(sent)))
            await answered(made, decision)
        return sizes

    sizes = asyncio.run(sent_sizes())
    first = next(i for i, (outcome, _) in enumerate(sizes) if outcome == "applied")
    history = 1 + 2 * 40  # the system message and 40 interactions
    assert sizes[-1][1] <= history // 3, sizes  # compacted again as it grew back
    assert max(count for _, count in sizes[first:]) < history // 2, sizes


def test_an_answer_says_when_its_model_is_unpriced(tiktoken_files: object) -> None:
    """A model without a price (a local model, a gateway's alias): the answer says so and names
    the prices the decision assumed, or none when no reference is set; a priced model's answer
    says nothing."""
    clock = Clock()
    view = HeaderView.of([(b"x-conversation-id", b"c1")])

    async def headers(model: str, config: str | None = None) -> dict[bytes, bytes]:
        made = compactor(config or config_with(), clock)
        raw = turns(2, model=model)
        decision = await made.decide(Incoming(view, Body(raw), CHAT, {}, False))
        return dict(decision.response_headers)

    unpriced = asyncio.run(headers("some-unpriced-model"))
    with_price = asyncio.run(headers("priced-model"))
    assert unpriced[b"x-compaction-warning"] == b"unpriced-model; reference=3/0.3/3.75/15"
    assert b"x-compaction-warning" not in with_price
    alone = asyncio.run(headers("some-unpriced-model", config_with(reference="null")))
    assert alone[b"x-compaction-warning"] == b"unpriced-model"


TOOL_CONFIG = """
models: {{"priced-model": {{context_window: 1000000, encoding: o200k_base}}}}
pricing:
  models:
    "priced-model": {{input: 2.0, cached_input: 0.5, output: 8.0}}
summarizer: {{model: priced-model, max_summary_tokens: 256}}
policies:
  default:
    mode: inline
    keep: {{tokens: 600}}
    trigger: {{pays: {pays}, on_tool_success: [run_tests]}}
"""
TESTS_ROUND = 8  # the one round that runs the tests (and passes)


def agent_rounds(count: int) -> bytes:
    """An agent run of ``count`` rounds of ~150 tokens: files read, one test run that passes."""
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "fix the failing test"},
    ]
    for i in range(count):
        name = "run_tests" if i == TESTS_ROUND else "read_file"
        call = {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i} " * 70},
        ]
    return wirejson.encode({"model": "priced-model", "messages": messages})


def test_a_tool_trigger_makes_a_summary_only_when_it_pays(tiktoken_files: object) -> None:
    """The tests pass in round 8 of a short run (a prompt of ~1.5k tokens, its cache warm): a
    summary would cost its call and the cache break for a saving of a few hundred cached
    tokens a turn. Under ``pays`` the request goes out as the client sent it, and every later
    one too; without ``pays`` the tool trigger alone decides, and summarizes."""
    bodies = [agent_rounds(n) for n in range(1, 13)]
    gaps = [MINUTE] * len(bodies)
    clock = Clock()
    weighed = asyncio.run(
        play(compactor(TOOL_CONFIG.format(pays="true"), clock), clock, bodies, gaps)
    )
    other = Clock()
    told = asyncio.run(
        play(compactor(TOOL_CONFIG.format(pays="false"), other), other, bodies, gaps)
    )

    assert told[TESTS_ROUND + 1] == "applied", told  # the trigger fires on the tests' result
    assert set(weighed) == {"skipped"}, weighed


def with_tools(raw: bytes) -> bytes:
    """The request with an agent's tools: twenty of about 250 tokens each."""
    body = wirejson.parse(raw)
    body["tools"] = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{k}",
                "description": f"Tool {k}: " + "reads the workspace and reports " * 40,
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
        for k in range(20)
    ]
    return wirejson.encode(body)


def test_the_recall_tool_a_compaction_brings_in_is_priced_as_a_break(
    tiktoken_files: object,
) -> None:
    """The recall tool goes with the client's tools, before the system prompt and the turns:
    the first compaction that brings it in makes the provider bill the agent's tools again, not
    only what the summary replaced. Without recall the same compaction keeps them cached, so it
    pays sooner; with recall it waits until the saving also repays the tools."""
    bodies = [with_tools(turns(n)) for n in range(2, 14)]
    gaps = [MINUTE] * len(bodies)
    off = config_with() + "recall: {enabled: false}\n"
    on_clock, off_clock = Clock(), Clock()
    with_recall = asyncio.run(play(compactor(config_with(), on_clock), on_clock, bodies, gaps))
    without = asyncio.run(play(compactor(off, off_clock), off_clock, bodies, gaps))

    assert "applied" in without, without
    first = without.index("applied")
    assert with_recall[: first + 1] == ["skipped"] * (first + 1), with_recall


# gpt-5's prices; a summary keeps the last 3 interactions, so a first cut is small against what
# it rewrites, and waiting for a larger one pays unless a token trigger comes first.
NEAR_WINDOW = """
models: {{"priced-model": {{context_window: {window}, encoding: o200k_base}}}}
pricing:
  models:
    "priced-model": {{input: 1.25, cached_input: 0.125, output: 10.0}}
summarizer: {{model: priced-model, max_summary_tokens: 1024}}
policies:
  default:
    mode: inline
    keep: {{interactions: 3}}
    trigger: {{pays: {pays}, pays_from_tokens: 2000}}
"""


def test_a_cut_is_not_held_back_past_the_window_trigger(tiktoken_files: object) -> None:
    """Waiting for a larger cut assumes the conversation grows on towards it; when the window's
    trigger will compact it first, regardless of price, the price trigger compacts now rather
    than at the trigger (where the summary served only the turns after it)."""
    bodies = [turns(n) for n in range(2, 34)]
    gaps = [MINUTE] * len(bodies)

    def first_applied(window: int, pays: str = "true") -> int:
        clock = Clock()
        made = compactor(NEAR_WINDOW.format(window=window, pays=pays), clock)
        return asyncio.run(play(made, clock, bodies, gaps)).index("applied")

    at_trigger = first_applied(30_000, pays="false")  # context_fraction 0.8: 24k tokens
    # Far from any trigger, the same cut waits past that turn for a larger one...
    assert first_applied(1_000_000) > at_trigger
    # ...near it, it is made turns before the trigger would have made it.
    assert first_applied(30_000) <= at_trigger - 4


# Sonnet's prices (Anthropic's rule: a write costs 1.25x input), an agent that stubs its old tool
# results in batches, as config/examples/coding-agent.yaml does.
STUBS_CONFIG = """
models: {"priced-model": {context_window: 1000000, encoding: o200k_base}}
pricing:
  models:
    "priced-model": {input: 3.0, cached_input: 0.3, cache_write: 3.75, output: 15.0}
    "cheap-model": {input: 0.15, cached_input: 0.075, output: 0.6}
summarizer: {model: cheap-model, max_summary_tokens: 256}
policies:
  default:
    mode: ahead
    keep: {tokens: 3000}
    trigger: {pays_from_tokens: 8000}
    clear_tool_results: {older_than_rounds: 4, min_tokens: 100, clear_at_least: 2500}
recall: {enabled: false}
"""


def agent_reads(count: int) -> bytes:
    """An agent run of ``count`` rounds, each saying what it does (~200 tokens) and reading a
    file of ~300 tokens."""
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "port the parser"},
    ]
    for i in range(count):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": "checking the parser " * 50, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i} " * 140},
        ]
    return wirejson.encode({"model": "priced-model", "messages": messages})


def test_a_summary_comes_instead_of_a_batch_of_stubs_once_it_pays(tiktoken_files: object) -> None:
    """A new batch of stubs moves the provider's cached prefix from its first stub on (under
    Anthropic's breakpoints, everything after the system prompt is written again at 1.25x), for
    a saving of the batch's tokens a turn; a summary then costs about as much to send and saves
    far more. On a public Claude Code session the recipe sent two such batches of 28k tokens
    each, at turns 48 and 58, before its first summary at turn 78 (0.83x sending direct). Past
    ``pays_from_tokens`` a due batch is held back, the summary is made, and the prompt moves once,
    when it applies: no request sends a batch of stubs the request after it replaces by a summary
    or by another batch."""
    clock = Clock()
    made, background = shared_compactor(STUBS_CONFIG, Listeners(), clock=clock)
    view = HeaderView.of([(b"x-conversation-id", b"c1")])
    sent: list[list[dict[str, object]]] = []
    outcomes: list[str] = []
    sizes: list[int] = []  # the tokens each request sent

    async def run() -> None:
        for n in range(1, 70):
            clock.now += 20.0
            decision = await made.decide(Incoming(view, Body(agent_reads(n)), CHAT, {}, False))
            headers = dict(decision.response_headers)
            outcomes.append(headers[b"x-compaction"].decode())
            sizes.append(int(headers[b"x-compaction-tokens-after"]))
            body = decision.body if decision.body is not None else agent_reads(n)
            sent.append(wirejson.parse(body)["messages"])
            await answered(made, decision)
            assert decision.follow_up is not None
            decision.follow_up.answered()  # a summary due is made now, before the next turn
            await background.join()

    asyncio.run(run())
    moved = [
        k for k in range(1, len(sent)) if sent[k][: len(sent[k - 1])] != sent[k - 1]
    ]  # requests whose prompt does not start with the previous one's
    summarized = [k for k in moved if "<agent_summary>" in json.dumps(sent[k])]
    assert summarized, outcomes
    first = summarized[0]
    # Before the first summary, only batches in a prompt under pays_from_tokens moved it...
    assert all(sizes[k - 1] < 8000 for k in moved if k < first), (moved, sizes)
    # ...and the summary came instead of the next one, which was held back meanwhile.
    assert sizes[first - 1] >= 8000 and first - 1 not in moved, (moved, sizes)


def test_the_default_floor_weighs_a_conversation_from_20k_tokens(tiktoken_files: object) -> None:
    """A conversation of 20-30k tokens (a short agent task, a long chat) is weighed by price under
    the default ``pays_from_tokens``: compacted once a summary pays, not left whole until 32k."""
    shipped_floor = CONFIG.replace(", pays_from_tokens: 2000", "")
    clock = Clock()
    bodies = [turns(n) for n in range(20, 30)]
    outcomes = asyncio.run(
        play(
            compactor(shipped_floor.format(pays="true", reference=SONNET), clock),
            clock,
            bodies,
            [MINUTE] * len(bodies),
        )
    )
    assert "applied" in outcomes, outcomes


@pytest.mark.parametrize("pin", [(), ('role == "user"',)])
def test_what_a_summary_reads_is_counted_from_the_planners_counts(
    pin: tuple[str, ...], tiktoken_files: object
) -> None:
    """The summary a candidate asks for is weighed by the counts the planner carried, less
    the pinned messages (a dialect's or the policy's): what counting its messages gives."""
    policy = PolicySettings(
        trigger=TriggerSettings(context_fraction=0, messages=6),
        keep=KeepSettings(interactions=1),
        pin=pin,
    )
    counter = TokenCounter(facts=FactCache(max_histories=3))
    rng = random.Random(3)
    asked = 0
    for history in _histories(19, 300):
        prior = PriorSummary("earlier", rng.randint(1, len(history)), "cp")
        with counter.facts.request() as facts:
            view = counter.with_facts(facts)
            made = plan(history, policy, model="gpt-4o", counter=view, model_info=None, prior=prior)
            wanted = made.summary_request
            if wanted is None:
                continue
            asked += 1
            expected = counter.count_messages(list(wanted.messages), "gpt-4o")
            assert _summary_reads(made, wanted, view, "gpt-4o") == expected
    assert asked > 100
