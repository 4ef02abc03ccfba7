"""The planner: strategies, keep, prior summaries, window budget, tool-result clearing, force."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.headroom import DEEPER_SHARE
from proxy.core.interactions import group
from proxy.core.planner import Plan, PriorSummary, plan
from proxy.core.policy import (
    ClearToolResultsSettings,
    KeepSettings,
    ModelInfo,
    PolicySettings,
    TriggerSettings,
)
from proxy.core.summary_message import CLOSE_TAG, OPEN_TAG, render_summary_message
from proxy.core.tokens import TokenCounter
from tests.support.messages import assistant, chat, system, tool, user
from tests.support.strategies import agent_runs, conversations, tool_pairs_intact

ALWAYS = TriggerSettings(context_fraction=0, messages=1)  # fires on any real conversation
NEVER = TriggerSettings(context_fraction=0)


def policy(**kw: Any) -> PolicySettings:
    kw.setdefault("trigger", ALWAYS)
    return PolicySettings(**kw)


def run(messages: list[dict], pol: PolicySettings, counter: TokenCounter, **kw: Any) -> Plan:
    kw.setdefault("model_info", None)
    kw.setdefault("prior", None)
    return plan(messages, pol, model="gpt-4o", counter=counter, **kw)


def contents(messages: list[dict]) -> list[str]:
    return [str(m.get("content"))[:12] for m in messages]


# --- summarize -----------------------------------------------------------------------------------


def test_below_every_trigger_the_request_is_sent_untouched(counter: TokenCounter) -> None:
    messages = chat(10)
    p = run(messages, policy(trigger=NEVER), counter)
    assert p.messages is messages
    assert (p.fired, p.summary_request, p.changed) == ((), None, False)
    assert p.tokens_after == p.tokens_before == counter.count_messages(messages, "gpt-4o")


def test_fired_summarize_asks_for_a_summary_of_all_but_the_kept_interactions(
    counter: TokenCounter,
) -> None:
    messages = chat(10)
    p = run(messages, policy(), counter)
    assert p.fired == ("messages",)
    request = p.summary_request
    assert request is not None
    assert (request.start, request.covered, request.previous) == (1, 17, None)
    assert list(request.messages) == messages[1:17]
    assert p.messages is messages  # still sendable as is until the summary exists

    done = p.with_summary("The user asked ten questions.", checkpoint_id="cp1")
    assert done.messages[0] == messages[0]
    assert done.messages[1]["role"] == "system"
    assert done.messages[1]["content"].startswith(OPEN_TAG)
    assert "The user asked ten questions." in done.messages[1]["content"]
    assert done.messages[2:] == messages[17:]  # the last 2 interactions verbatim
    assert done.tokens_after == counter.count_messages(done.messages, "gpt-4o")
    assert done.tokens_after < p.tokens_before / 3
    assert done.applied_checkpoint == "cp1"
    # deterministic: the same summary renders the same bytes (provider prompt caches keep hitting)
    assert p.with_summary("The user asked ten questions.", checkpoint_id="cp1") == done


def test_a_prior_summary_applies_once_the_conversation_crosses_a_trigger(
    counter: TokenCounter,
) -> None:
    messages = chat(10)
    prior = PriorSummary("Earlier: questions 0-7.", covered=17, checkpoint_id="cp1")
    p = run(
        messages,
        policy(trigger=TriggerSettings(context_fraction=0, messages=15)),
        counter,
        prior=prior,
    )
    assert p.applied_checkpoint == "cp1"
    assert p.messages[1] == render_summary_message("Earlier: questions 0-7.")
    assert p.messages[2:] == messages[17:]
    # measured again on the compacted prompt (6 messages), nothing is due any more
    assert (p.fired, p.summary_request) == ((), None)


def test_a_ready_prior_waits_until_a_trigger_fires(counter: TokenCounter) -> None:
    messages = chat(10)
    prior = PriorSummary("Earlier.", covered=17, checkpoint_id="cp1")
    p = run(
        messages,
        policy(trigger=TriggerSettings(context_fraction=0, messages=30)),
        counter,
        prior=prior,
    )
    assert p.applied_checkpoint is None
    assert p.messages is messages


def test_an_active_prior_applies_without_a_trigger_so_it_never_flaps(
    counter: TokenCounter,
) -> None:
    """A tool-outcome trigger fires on one request only; the summary it caused must stay."""
    messages = chat(10)
    tool_policy = policy(trigger=TriggerSettings(context_fraction=0, on_tool_success=("x",)))
    waiting = PriorSummary("Earlier.", covered=17, checkpoint_id="cp1")
    assert run(messages, tool_policy, counter, prior=waiting).applied_checkpoint is None
    active = PriorSummary("Earlier.", covered=17, checkpoint_id="cp1", active=True)
    p = run(messages, tool_policy, counter, prior=active)
    assert p.applied_checkpoint == "cp1"
    assert p.messages[2:] == messages[17:]


def test_a_new_summary_extends_the_prior_and_never_rereads_it(counter: TokenCounter) -> None:
    messages = chat(20)
    prior = PriorSummary("Earlier: questions 0-4.", covered=11, checkpoint_id="cp1")
    p = run(
        messages,
        policy(trigger=TriggerSettings(context_fraction=0, interactions=5)),
        counter,
        prior=prior,
    )
    assert p.applied_checkpoint == "cp1"
    assert p.fired == ("interactions",)  # 15 interactions since the summary
    request = p.summary_request
    assert request is not None
    assert (request.start, request.covered) == (11, 37)
    assert request.previous == "Earlier: questions 0-4."
    assert list(request.messages) == messages[11:37]


@pytest.mark.parametrize("covered", [0, 1, 2, 12, 40, 41, 500])
def test_a_prior_that_does_not_fit_this_history_is_ignored(
    counter: TokenCounter, covered: int
) -> None:
    messages = chat(20)  # interactions start at odd indexes; 41 is past the end
    p = run(messages, policy(), counter, prior=PriorSummary("stale", covered, "cp"))
    assert p.applied_checkpoint is None
    assert p.summary_request is not None and p.summary_request.previous is None


def test_near_a_trigger_a_summary_is_asked_for_ahead_of_time(counter: TokenCounter) -> None:
    messages = chat(10)  # 21 messages
    p = run(messages, policy(trigger=TriggerSettings(context_fraction=0, messages=25)), counter)
    assert (p.fired, p.near) == ((), ("messages",))
    assert p.summary_request is not None
    assert p.messages is messages


def test_context_fraction_fires_from_the_model_window(counter: TokenCounter) -> None:
    messages = chat(10)
    tokens = counter.count_messages(messages, "gpt-4o")
    p = run(messages, PolicySettings(), counter, model_info=ModelInfo(context_window=tokens))
    assert p.fired == ("context_fraction",)


# --- neuralyze, trim, off --------------------------------------------------------------------------


def test_neuralyze_drops_old_interactions_and_leaves_a_notice(counter: TokenCounter) -> None:
    messages = chat(10)
    notice = "Earlier turns were removed."
    p = run(messages, policy(strategy="neuralyze", neuralyze_notice=notice), counter)
    assert p.messages == [messages[0], {"role": "system", "content": notice}, *messages[17:]]
    assert p.summary_request is None
    quiet = run(messages, policy(strategy="neuralyze", trigger=NEVER), counter)
    assert quiet.messages is messages


def test_trim_always_keeps_the_newest_interactions_within_the_budget(
    counter: TokenCounter,
) -> None:
    messages = chat(10)
    last_three = sum(counter.per_message(messages[15:], "gpt-4o"))
    p = run(
        messages,
        policy(strategy="trim", trigger=NEVER, keep=KeepSettings(tokens=last_three + 5)),
        counter,
    )
    assert p.messages == [messages[0], *messages[15:]]
    assert p.fired == ()


def test_off_sends_exactly_what_came(counter: TokenCounter) -> None:
    messages = [*chat(10), render_summary_message("echoed")]
    p = run(messages, policy(strategy="off"), counter)
    assert p.messages is messages
    assert p.summary_request is None


def test_an_echoed_summary_is_removed_before_planning(counter: TokenCounter) -> None:
    messages = chat(3)
    echoed = [messages[0], render_summary_message("old"), *messages[1:]]
    p = run(echoed, policy(trigger=NEVER), counter)
    assert p.messages == messages
    assert p.source == messages


# --- keep --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keep", "kept_from"),
    [
        (KeepSettings(interactions=3), 15),
        (KeepSettings(interactions=50), 1),
        (KeepSettings(messages=3), 17),  # rounded up to whole interactions: 4 messages
        (KeepSettings(messages=4), 17),
        (KeepSettings(messages=5), 15),
        (KeepSettings(tokens=1), 19),  # the latest user message and after: always kept
        (KeepSettings(fraction=0.5), 17),  # no window known: the default 2 interactions
    ],
)
def test_keep_modes(counter: TokenCounter, keep: KeepSettings, kept_from: int) -> None:
    messages = chat(10)
    p = run(messages, policy(strategy="neuralyze", keep=keep), counter)
    assert p.kept_from == kept_from
    assert p.messages == [messages[0], *messages[kept_from:]]


def test_a_chat_keeps_its_chat_interactions_and_an_agent_run_its_tokens(
    counter: TokenCounter,
) -> None:
    keep = KeepSettings(tokens=10_000, chat_interactions=3)
    messages = chat(10)
    p = run(messages, policy(strategy="neuralyze", keep=keep), counter)
    assert p.kept_from == 15
    agent = agent_run(12)
    p = run(agent, policy(strategy="neuralyze", keep=keep), counter)
    assert p.kept_from == 1  # the tokens, not 3 interactions: its one task, whole, fits
    assert KeepSettings(chat_interactions=3).interactions == 2  # the default keep otherwise


def test_keep_tokens_and_fraction_walk_backwards_over_whole_interactions(
    counter: TokenCounter,
) -> None:
    messages = chat(10)
    per = run(messages, policy(trigger=NEVER), counter).interaction_tokens
    budget = per[-1] + per[-2] + per[-3]
    for keep, info in [
        (KeepSettings(tokens=budget), None),
        (KeepSettings(tokens=budget + per[-4] - 1), None),
        (KeepSettings(fraction=0.5), ModelInfo(context_window=budget * 2)),
    ]:
        p = run(messages, policy(strategy="neuralyze", keep=keep), counter, model_info=info)
        assert p.kept_from == 15, keep


# --- window budget, clearing, force --------------------------------------------------------------


def test_window_drops_the_oldest_kept_interactions_until_it_fits(counter: TokenCounter) -> None:
    messages = chat(10)
    full = run(messages, policy(trigger=NEVER), counter)
    budget = full.tokens_before - sum(full.interaction_tokens[:6])
    p = run(messages, policy(trigger=NEVER, window_tokens=budget), counter)
    assert p.tokens_after <= budget
    assert p.messages == [messages[0], *messages[13:]]
    tiny = run(messages, policy(trigger=NEVER, window_tokens=1), counter)
    assert tiny.messages == [messages[0], *messages[19:]]  # never the latest user message


def test_clear_tool_results_stubs_old_large_results_before_triggers(
    counter: TokenCounter,
) -> None:
    messages = [system()]
    for i in range(6):
        messages += [
            user(f"step {i}"),
            assistant(None, (f"c{i}", "cat", "{}")),
            tool(f"c{i}", "line of output\n" * 400),
            assistant("ok"),
        ]
    raw_tokens = counter.count_messages(messages, "gpt-4o")
    clear = ClearToolResultsSettings(older_than_interactions=2, min_tokens=100)
    trigger = TriggerSettings(context_fraction=0, input_tokens=raw_tokens // 2)
    p = run(messages, policy(trigger=trigger, clear_tool_results=clear), counter)
    assert p.cleared == (3, 7, 11, 15)
    assert p.fired == ()  # clearing alone brought it under the trigger
    assert p.messages[3]["tool_call_id"] == "c0"
    assert p.messages[3]["content"].startswith("[tool result cleared")
    assert p.messages[19:] == messages[19:]
    assert messages[3]["content"].startswith("line of output")  # the client's copy untouched
    assert tool_pairs_intact(p.messages)
    assert p.tokens_after < raw_tokens / 2


def test_force_compacts_to_the_last_interaction_within_a_budget(counter: TokenCounter) -> None:
    messages = chat(10)
    p = run(messages, policy(trigger=NEVER), counter, force=True, budget_tokens=400)
    assert "forced" in p.fired
    assert p.summary_request is not None and p.summary_request.covered == 19
    done = p.with_summary("short")
    assert done.messages[2:] == messages[19:]
    assert done.tokens_after <= 400


def test_with_summary_rejects_an_unsafe_cover(counter: TokenCounter) -> None:
    p = run(chat(4), policy(), counter)
    with pytest.raises(ValueError, match="safe"):
        p.with_summary("x", covered=2)


def test_summary_message_is_capped(counter: TokenCounter) -> None:
    p = run(chat(4), policy(), counter, summary_max_chars=500)
    done = p.with_summary("long " * 1000)
    content = done.messages[1]["content"]
    assert len(content) < 800
    assert content.endswith(CLOSE_TAG)
    assert "[summary truncated]" in content


# --- properties -----------------------------------------------------------------------------------

policies = st.builds(
    PolicySettings,
    strategy=st.sampled_from(["summarize", "neuralyze", "trim"]),
    trigger=st.builds(
        TriggerSettings,
        context_fraction=st.just(0),
        input_tokens=st.sampled_from([0, 100, 400]),
        messages=st.integers(0, 12),
        interactions=st.integers(0, 4),
    ),
    keep=st.one_of(
        st.builds(KeepSettings, interactions=st.integers(1, 4)),
        st.builds(KeepSettings, messages=st.integers(1, 8)),
        st.builds(KeepSettings, tokens=st.integers(1, 300)),
        st.builds(KeepSettings, fraction=st.sampled_from([0.1, 0.5])),
    ),
    clear_tool_results=st.builds(
        ClearToolResultsSettings,
        older_than_interactions=st.integers(0, 3),
        older_than_rounds=st.integers(0, 4),
        min_tokens=st.integers(0, 30),
    ),
    window_tokens=st.sampled_from([0, 50, 200, 600]),
)


def newest_round(messages: list[dict]) -> list[dict]:
    """The latest user message's interaction from its newest tool round on (the whole
    interaction when it has no round yet): what every plan must send verbatim, last."""
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    calls = [
        i
        for i in range(last_user, len(messages))
        if messages[i]["role"] == "assistant"
        and (messages[i].get("tool_calls") or messages[i].get("function_call"))
    ]
    return messages[calls[-1] :] if calls else messages[last_user:]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.one_of(conversations(), agent_runs()),
    pol=policies,
    force=st.booleans(),
    prior_at=st.none() | st.integers(0, 100),
)
def test_any_plan_keeps_tool_pairs_the_preamble_the_task_and_the_newest_round(
    counter: TokenCounter,
    messages: list[dict],
    pol: PolicySettings,
    force: bool,
    prior_at: int | None,
) -> None:
    """Also with a stored summary ending at any cut point (an interaction start or between the
    rounds of one), waiting for its trigger or already active."""
    prior = None
    cuts = group(messages).cuts
    if prior_at is not None and cuts:
        covered = cuts[prior_at % len(cuts)]
        prior = PriorSummary("P", covered, "cp", active=prior_at % 2 == 0)
    p = run(messages, pol, counter, force=force, budget_tokens=150 if force else 0, prior=prior)
    results = [p] if p.summary_request is None else [p, p.with_summary("S")]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    preamble = p.grouping.preamble_len
    for result in results:
        sent = result.messages
        assert tool_pairs_intact(sent)
        assert sent[:preamble] == messages[:preamble]
        # the current task, verbatim, and the newest round, last and whole
        assert any(m is messages[last_user] for m in sent)
        tail = newest_round(messages)
        assert [m.get("tool_call_id") for m in sent[-len(tail) :]] == [
            m.get("tool_call_id") for m in tail
        ]
        assert [m["role"] for m in sent[-len(tail) :]] == [m["role"] for m in tail]
        # at most one summary, right after the preamble
        summaries = [i for i, m in enumerate(sent) if OPEN_TAG in str(m.get("content"))]
        assert summaries in ([], [preamble])


# --- agent runs: one task, many tool rounds ---------------------------------------------


def agent_run(rounds: int, *, words: int = 60) -> list[dict]:
    """One system prompt, one task, then ``rounds`` rounds of a tool call and its output."""
    messages = [system("You are a coding agent."), user("fix the failing tests")]
    for i in range(rounds):
        messages += [
            assistant(None, (f"c{i}", "sh", f'{{"cmd": "pytest -k t{i}"}}')),
            tool(f"c{i}", f"round {i} " + "FAILED line " * words),
        ]
    return messages


def test_one_long_task_is_cut_between_rounds_and_keeps_the_task(counter: TokenCounter) -> None:
    """The issue's reproduction: it used to fire and save 0 tokens."""
    messages = agent_run(35)
    pol = policy(
        trigger=TriggerSettings(context_fraction=0, input_tokens=3000),
        keep=KeepSettings(tokens=1500),
    )
    p = run(messages, pol, counter)
    assert p.fired == ("input_tokens",) and p.tokens_before > 5000
    request = p.summary_request
    assert request is not None and request.start == 1
    assert messages[request.covered - 1]["role"] == "tool"  # a round boundary
    assert request.messages[0] == messages[1]  # the summarizer sees the task

    done = p.with_summary("Ran the tests; t0-t20 fixed.")
    sent = done.messages
    assert sent[0] == messages[0] and OPEN_TAG in sent[1]["content"]
    assert sent[2] is messages[1]  # the task, verbatim, right after the summary
    assert sent[3:] == messages[request.covered :]
    assert sent[-2:] == messages[-2:]  # the newest round
    assert done.task == 1 and done.kept_from == request.covered
    assert done.tokens_after == counter.count_messages(sent, "gpt-4o")
    assert done.tokens_after < 1500 + 200


def test_the_default_keep_cuts_deeper_when_one_interaction_is_the_whole_prompt(
    counter: TokenCounter,
) -> None:
    """keep: interactions 2 would keep everything; the cut moves round by round instead."""
    messages = agent_run(60, words=80)
    info = ModelInfo(context_window=8192)
    p = run(messages, PolicySettings(), counter, model_info=info)
    assert "context_fraction" in p.fired
    request = p.summary_request
    assert request is not None and request.covered > 1
    done = p.with_summary("S")
    near = 0.8 * 0.8 * 8192
    assert done.tokens_after < near * DEEPER_SHARE + 100
    assert done.messages[2] is messages[1] and done.messages[-1] is messages[-1]


def test_a_prior_covering_part_of_a_task_applies_and_its_prefix_stays_stable(
    counter: TokenCounter,
) -> None:
    messages = agent_run(30)
    prior = PriorSummary("Rounds 0-19 done.", covered=42, checkpoint_id="cp", active=True)
    pol = policy(trigger=TriggerSettings(context_fraction=0, input_tokens=100_000))
    first = run(messages, pol, counter, prior=prior)
    assert first.applied_checkpoint == "cp"
    assert first.messages[1] == render_summary_message("Rounds 0-19 done.")
    assert first.messages[2:] == [messages[1], *messages[42:]]
    # two more rounds and then a new user turn: the prefix the provider caches does not move
    later = [*agent_run(32), user("thanks, now update the changelog")]
    second = run(later, pol, counter, prior=prior)
    assert second.messages[: len(first.messages)] == first.messages


def test_a_prior_inside_a_task_is_extended_never_reread(counter: TokenCounter) -> None:
    messages = agent_run(40)
    prior = PriorSummary("Rounds 0-9 done.", covered=22, checkpoint_id="cp", active=True)
    pol = policy(
        trigger=TriggerSettings(context_fraction=0, input_tokens=2000),
        keep=KeepSettings(tokens=800),
    )
    p = run(messages, pol, counter, prior=prior)
    request = p.summary_request
    assert request is not None
    assert (request.start, request.previous) == (22, "Rounds 0-9 done.")
    assert request.covered > 22 and messages[request.covered - 1]["role"] == "tool"


def test_a_summary_longer_than_what_it_replaces_is_not_applied(counter: TokenCounter) -> None:
    """Seen: short turns, 48 -> 87 tokens "applied"."""
    messages = [system(), user("hi"), assistant("hello"), user("ok"), assistant("yes"), user("?")]
    wordy = PriorSummary("The user greeted; " * 20, covered=5, checkpoint_id="cp", active=True)
    p = run(messages, policy(), counter, prior=wordy)
    assert p.applied_checkpoint is None and p.messages is messages
    # the next summary extends the prior's coverage: nothing is summarized twice
    assert p.summary_request is None or p.summary_request.start == 5
    short = PriorSummary("Greetings.", covered=5, checkpoint_id="cp", active=True)
    messages[1]["content"] = "hi " * 300
    assert run(messages, policy(), counter, prior=short).applied_checkpoint == "cp"


def test_a_trigger_with_nothing_safe_to_cut_is_blocked(counter: TokenCounter) -> None:
    messages = [system(), user("one huge question " * 300)]
    p = run(
        messages, policy(trigger=TriggerSettings(context_fraction=0, input_tokens=100)), counter
    )
    assert p.fired == ("input_tokens",)
    assert p.blocked and p.summary_request is None and p.messages is messages


def test_clearing_that_stubs_nothing_leaves_the_plan_unchanged(counter: TokenCounter) -> None:
    """With nothing to stub (no tool results, or only results smaller than their
    stub), the plan sends the very list that came in: ``skipped``, the client's bytes."""
    clear = ClearToolResultsSettings(older_than_interactions=1)
    plain = chat(10)
    p = run(plain, policy(trigger=NEVER, clear_tool_results=clear), counter)
    assert p.cleared == () and not p.changed and p.messages is plain
    short = [system(), user("go"), assistant(None, ("c1", "x", "{}")), tool("c1", "ok")]
    short += [assistant("done"), user("next"), assistant("sure")]
    p = run(short, policy(trigger=NEVER, clear_tool_results=clear), counter)
    assert p.cleared == () and p.messages is short
    assert p.tokens_after == p.tokens_before


def test_tool_results_older_than_n_rounds_are_cleared_inside_one_task(
    counter: TokenCounter,
) -> None:
    messages = agent_run(6)
    pol = policy(trigger=NEVER, clear_tool_results=ClearToolResultsSettings(older_than_rounds=2))
    p = run(messages, pol, counter)
    assert p.cleared == (3, 5, 7, 9)  # rounds 0-3; the newest two stay
    assert all("cleared" in p.messages[i]["content"] for i in p.cleared)
    assert p.messages[10:] == messages[10:]
    assert [m.get("tool_call_id") for m in p.messages] == [m.get("tool_call_id") for m in messages]


def test_clearing_in_batches_moves_the_prompt_prefix_once_per_batch(
    counter: TokenCounter,
) -> None:
    """Stubbing one more result every round re-bills the prompt's tail every turn. With
    ``clear_at_least`` results are stubbed only in whole batches of that many tokens, so a
    request's messages change (and the provider's cache breaks) once per batch, and a stub, once
    made, stays byte-identical in every later request."""
    clear = ClearToolResultsSettings(older_than_rounds=2, clear_at_least=400)
    pol = policy(trigger=NEVER, clear_tool_results=clear)
    one_by_one = policy(
        trigger=NEVER, clear_tool_results=ClearToolResultsSettings(older_than_rounds=2)
    )
    runs = [agent_run(n) for n in range(3, 21)]
    plans = [run(messages, pol, counter) for messages in runs]
    eager = [run(messages, one_by_one, counter) for messages in runs]
    # Every round ages one result past the limit: one by one, nearly every request stubs anew.
    eager_changes = sum(a.cleared != b.cleared for a, b in itertools.pairwise(eager))
    changes = sum(a.cleared != b.cleared for a, b in itertools.pairwise(plans))
    assert eager_changes == len(runs) - 1
    assert 0 < changes <= eager_changes // 3
    for earlier, later, messages in zip(plans, plans[1:], runs[1:], strict=False):
        # What was stubbed stays stubbed, with the same bytes; a batch is cleared whole.
        assert set(earlier.cleared) <= set(later.cleared)
        assert all(later.messages[i] == earlier.messages[i] for i in earlier.cleared)
        cleared_now = [i for i in later.cleared if i not in earlier.cleared]
        batch = sum(counter.count_message(messages[i], "gpt-4o") for i in cleared_now)
        assert not cleared_now or batch >= 400


def test_an_overflow_rescue_of_one_task_keeps_the_task_and_the_newest_round(
    counter: TokenCounter,
) -> None:
    messages = agent_run(30)
    p = run(messages, policy(trigger=NEVER), counter, force=True, budget_tokens=1000)
    request = p.summary_request
    assert p.fired == ("forced",) and request is not None and request.covered > 1
    done = p.with_summary("S")
    assert done.tokens_after <= 1000
    assert done.messages[2] is messages[1] and done.messages[-2:] == messages[-2:]


def test_a_forced_compaction_of_one_task_keeps_its_task_and_newest_round(
    counter: TokenCounter,
) -> None:
    """The admin API's "compact now" on an agent run: there is no older interaction to fold."""
    messages = agent_run(10)
    p = run(messages, policy(trigger=NEVER), counter, force=True)
    assert p.summary_request is not None and p.summary_request.covered == len(messages) - 2
    assert p.with_summary("S").messages[2:] == [messages[1], *messages[-2:]]


# --- keep nothing ------------------------------------------------------------------------------


def test_keep_nothing_summarizes_all_but_the_current_task(counter: TokenCounter) -> None:
    messages = chat(6)  # the last interaction is the current task: its question and answer
    p = run(messages, policy(keep=KeepSettings(interactions=0)), counter)
    request = p.summary_request
    assert request is not None and request.start == 1
    # Everything before the latest user message is summarized; that message and after stay.
    assert request.covered == len(messages) - 2
    sent = p.with_summary("Six questions, answered.").messages
    assert sent[0] == messages[0] and OPEN_TAG in sent[1]["content"]
    assert sent[2:] == messages[-2:]


def test_keep_nothing_in_an_agent_run_keeps_the_task_and_the_newest_round(
    counter: TokenCounter,
) -> None:
    messages = [*chat(3), *agent_run(6)[1:]]  # three old chats, then a task with 6 tool rounds
    p = run(messages, policy(keep=KeepSettings(interactions=0)), counter)
    request = p.summary_request
    assert request is not None and request.covered == len(messages) - 2
    sent = p.with_summary("Old chats; rounds t0-t4 ran.").messages
    task = messages.index(user("fix the failing tests"))
    assert sent[2] is messages[task]  # the current task, verbatim, right after the summary
    assert sent[3:] == messages[-2:]  # the newest tool round, call and result whole
    assert sent[3]["tool_calls"][0]["id"] == sent[4]["tool_call_id"]
    # One interaction is not "nothing": it keeps the whole task with every round.
    one = run(messages, policy(keep=KeepSettings(interactions=1)), counter)
    assert one.summary_request is not None and one.summary_request.covered == task


@pytest.mark.parametrize("keep", [{"messages": 0}, {"tokens": 0}, {"fraction": 0}])
def test_keep_nothing_has_one_spelling(keep: dict) -> None:
    with pytest.raises(ValueError, match=r"interactions: 0"):
        KeepSettings(**keep)
    assert KeepSettings(interactions=0).interactions == 0
    with pytest.raises(ValueError, match="exactly one"):
        KeepSettings(interactions=0, tokens=5)


def test_a_batch_of_stubs_after_a_summary_saves_its_threshold_on_what_is_sent(
    counter: TokenCounter,
) -> None:
    """A batch of stubs breaks the provider's cached prefix from its first stub on, so it must
    save ``clear_at_least`` tokens in the prompt sent. Once a summary covers the older rounds,
    their results are not sent: a batch counted from the start of the history closed on
    savings mostly inside the summary, and stubbed a few results after it for a saving too
    small to pay the break (a public mini-swe-agent session cost more than sending direct)."""
    clear = ClearToolResultsSettings(older_than_rounds=2, clear_at_least=400)
    pol = policy(trigger=NEVER, clear_tool_results=clear)
    covered = 2 + 2 * 10  # the summary stands for the first 10 rounds
    prior = PriorSummary("Rounds 0-9: ran the tests.", covered=covered, active=True)
    for rounds in range(12, 22):
        messages = agent_run(rounds)
        p = run(messages, pol, counter, prior=prior)
        assert p.applied_checkpoint is None and p.summary_text is not None  # the summary is sent
        sent_stubs = [i for i in p.cleared if i >= covered]
        saved = sum(
            counter.count_message(messages[i], "gpt-4o")
            - counter.count_message(p.messages[i - covered + 3], "gpt-4o")
            for i in sent_stubs
        )
        assert not sent_stubs or saved >= 400, (rounds, sent_stubs, saved)


def test_a_plan_sending_other_messages_is_a_replace_of_those_two_fields(
    counter: TokenCounter,
) -> None:
    """``Plan.sending`` copies every field (the private context too) and changes only the two
    it names; the plan it is made from stays as it was."""
    history = [system(), *(m for i in range(6) for m in (user(f"q{i}"), assistant(f"a{i}")))]
    made = run(history, policy(), counter, prior=PriorSummary("S", 5, "ck", active=True))
    sent = [*made.messages, user("extra")]
    copy = made.sending(sent, made.tokens_after + 7)
    expected = replace(made, messages=sent, tokens_after=made.tokens_after + 7)
    assert vars(copy) == vars(expected) and type(copy) is Plan
    assert made.messages is not sent and copy.messages is sent
    assert made.tokens_after + 7 == copy.tokens_after
