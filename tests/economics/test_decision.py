"""Deciding by price, on hand-computed cases."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from proxy.economics.decision import Outlook, decide, turns_to_reach
from proxy.economics.prices import UNPRICED, PriceTable

TABLE = PriceTable()
GPT41 = TABLE.price("gpt-4.1")  # 2.00 in, 0.50 cached, 2.00 write, 8.00 out
GPT5 = TABLE.price("gpt-5")  # 1.25 in, 0.125 cached, 1.25 write, 10.00 out
MINI = TABLE.price("gpt-4o-mini")  # 0.15, 0.075, 0.15, 0.60
SONNET = TABLE.price("claude-sonnet-4-5")  # 3.00, 0.30, 3.75, 15.00


def outlook(**changes: float | bool) -> Outlook:
    """150k tokens compacted to 30k by a 120k-token summary call writing 1k, 1.5k a turn."""
    base: dict[str, float] = {
        "prompt_tokens": 150_000,
        "compacted_tokens": 30_000,
        "summary_input_tokens": 120_000,
        "summary_output_tokens": 1_000,
        "growth_per_turn": 1_500,
        "remaining_turns": 1,
        "cache_warm": True,
    }
    return Outlook(**{**base, **changes})


def test_a_conversation_ending_short_of_the_trigger_does_not_pay_for_a_summary() -> None:
    # summary 120000*2 + 1000*8 = 248000; compacted turn 30000*2 = 60000; uncompacted turn,
    # warm: 148500*0.5 + 1500*2 = 77250. Cost (248000 + 60000 - 77250)/1e6 = $0.23075.
    # Each later turn reads 120000 fewer cached tokens: $0.06. Break-even 3.85 turns.
    decision = decide(outlook(remaining_turns=1), GPT41)
    assert not decision.compact and decision.reason == "does-not-pay"
    assert decision.cost == pytest.approx(0.23075)
    assert decision.saving_per_turn == pytest.approx(0.06)
    assert decision.break_even_turns == pytest.approx(0.23075 / 0.06)
    assert decide(outlook(remaining_turns=3), GPT41).compact is False
    assert decide(outlook(remaining_turns=4), GPT41).compact is True


def test_a_cold_cache_compacts() -> None:
    # Cold, the uncompacted turn writes all 150000: 300000. Cost (248000 + 60000 - 300000)/1e6
    # = $0.008, repaid within the next turn (0.008 / 0.06 = 0.13 turns).
    decision = decide(outlook(cache_warm=False), GPT41)
    assert decision.compact and decision.reason == "pays"
    assert decision.cost == pytest.approx(0.008)
    assert decision.break_even_turns == pytest.approx(0.008 / 0.06)
    # With a cheap summarizer (120000*0.15 + 1000*0.6 = 18600) it pays at once, even as the
    # last turn: 18600 + 60000 - 300000 < 0.
    cheap = decide(outlook(cache_warm=False, remaining_turns=0), GPT41, summarizer_price=MINI)
    assert cheap.compact and cheap.break_even_turns == 0.0
    assert cheap.cost == pytest.approx(-0.2214)


def test_a_warm_cache_with_few_turns_left_does_not_compact() -> None:
    # Sonnet: summary 120000*3 + 1000*15 = 375000; compacted turn written 30000*3.75 = 112500;
    # uncompacted, warm: 148000*0.3 + 2000*3.75 = 51900. Cost $0.4356; saving 120000*0.3 =
    # $0.036 a turn: 12.1 turns to break even.
    case = outlook(growth_per_turn=2_000, remaining_turns=2)
    decision = decide(case, SONNET)
    assert not decision.compact
    assert decision.cost == pytest.approx(0.4356)
    assert decision.break_even_turns == pytest.approx(0.4356 / 0.036)
    assert decide(outlook(growth_per_turn=2_000, remaining_turns=20), SONNET).compact


def test_the_window_overrides_price() -> None:
    decision = decide(outlook(window_forced=True, remaining_turns=0), GPT41)
    assert decision.compact and decision.reason == "window"
    assert decision.break_even_turns == pytest.approx(0.23075 / 0.06)  # still reported


def test_no_saving_never_pays() -> None:
    decision = decide(outlook(compacted_tokens=150_000, remaining_turns=1_000), GPT41)
    assert not decision.compact and decision.reason == "no-saving"
    assert decision.break_even_turns is None


def test_a_summarizer_reading_the_cache_costs_less() -> None:
    # 100000 of the 120000 read at 0.5: 20000*2 + 100000*0.5 + 1000*8 = 98000 instead of 248000.
    cached = outlook(summary_input_tokens=20_000, summary_cached_tokens=100_000)
    assert decide(cached, GPT41).cost == pytest.approx((98_000 + 60_000 - 77_250) / 1e6)


def test_an_unpriced_model_is_left_to_the_token_thresholds() -> None:
    assert decide(outlook(remaining_turns=100), UNPRICED).reason == "unpriced"
    assert not decide(outlook(remaining_turns=100), UNPRICED).compact
    assert decide(outlook(window_forced=True), UNPRICED).compact


def test_turns_to_reach() -> None:
    assert turns_to_reach(150_000, 160_000, 2_000) == 5.0
    assert turns_to_reach(170_000, 160_000, 2_000) == 0.0
    assert turns_to_reach(150_000, 160_000, 0) == math.inf


def grown_back(**changes: float) -> Outlook:
    """A prompt grown back 10k over its 30k compacted form, summarized by a cheap model."""
    base: dict[str, float] = {
        "prompt_tokens": 40_000,
        "compacted_tokens": 30_000,
        "summary_input_tokens": 11_000,
        "summary_output_tokens": 800,
        "remaining_turns": 60,
    }
    return outlook(**{**base, **changes})


def test_compacting_again_soon_after_a_compaction_waits_until_the_excess_is_worth_it() -> None:
    """Compacting now is weighed against compacting later, not only against never: a prompt
    that grew back a few turns' worth over its checkpoint saves little per turn, and each
    compaction writes the new prefix again. The excess ``E`` (prompt - compacted) took ``E / g``
    turns to accumulate; compacting every ``T`` turns costs ``K / T + g * c * T / 2`` a turn, least
    at ``T* = sqrt(2K / (g c))``, i.e. when the break-even ``K / (E c)`` is within ``E / (2g)``.
    """
    # 40k compacted to 30k with a cheap summarizer (11k read, 800 written), 1.5k a turn, gpt-4.1:
    # K = (11000*0.15 + 800*0.6 + 30000*2 - (38500*0.5 + 1500*2)) / 1e6 = $0.03988; each later
    # turn reads 10000 fewer cached tokens: $0.005, break-even 7.98 turns. Many turns remain,
    # but the 10k excess took 6.7 turns to grow: compacting later costs less (7.98 > 3.33).
    soon = grown_back()
    decision = decide(soon, GPT41, summarizer_price=MINI)
    assert decision.break_even_turns == pytest.approx(0.03988 / 0.005)
    assert not decision.compact and decision.reason == "does-not-pay"
    # With 30k of excess (60k -> 30k) the break-even is 2.2 turns, within 30k / 3k = 10: compact.
    later = outlook(
        prompt_tokens=60_000,
        compacted_tokens=30_000,
        summary_input_tokens=31_000,
        summary_output_tokens=800,
        remaining_turns=60,
    )
    assert decide(later, GPT41, summarizer_price=MINI).compact


def test_a_summary_made_ahead_is_not_held_back_for_later() -> None:
    """Its cost is spent: only the cache break counts, and waiting would leave it unused."""
    ready = outlook(
        prompt_tokens=40_000,
        compacted_tokens=30_000,
        summary_input_tokens=0,
        summary_output_tokens=0,
        remaining_turns=60,
    )
    # K = (30000*2 - 22250) / 1e6 = $0.03775, $0.005 a turn: 7.55 turns, beyond 10000 / 3000
    assert decide(ready, GPT41).compact


def test_a_prefix_the_compaction_leaves_in_place_is_read_from_the_cache() -> None:
    # 10000 of the 30000 compacted tokens (the tools and the system prompt) stay cached: that
    # turn writes 20000*2 + reads 10000*0.5 = 45000 instead of 60000. Cost (248000 + 45000 -
    # 77250)/1e6 = $0.21575: repaid in 3.6 turns where a moved prefix takes 3.85.
    kept = decide(outlook(kept_prefix_tokens=10_000), GPT41)
    assert kept.cost == pytest.approx(0.21575)
    assert kept.saving_per_turn == pytest.approx(0.06)
    # Moved (0 kept) it costs as before; cold, nothing is cached to keep.
    assert decide(outlook(kept_prefix_tokens=0), GPT41).cost == pytest.approx(0.23075)
    cold = outlook(kept_prefix_tokens=10_000, cache_warm=False)
    assert decide(cold, GPT41).cost == decide(replace(cold, kept_prefix_tokens=0), GPT41).cost


def test_a_first_compaction_that_cuts_little_waits_for_a_larger_cut() -> None:
    """The first compaction is weighed against a later one too, not only against never: it has
    the same choice as every next one (compacting at a larger excess later costs less than a
    small cut now, whose new prefix is written for little), and a break-even within the turns a
    conversation has had is as likely as not to fall after it ends."""
    # A public opencode session through long-chat.yaml at turn 53 of 65 (keep: 8 interactions):
    # 32042 tokens compacted to 22766 by a summary of 11224 read, 1122 written, 568 a turn, gpt-5
    # with gpt-4o-mini summarizing. K = (11224*0.15 + 1122*0.6 + 22766*1.25 - (31474*0.125 +
    # 568*1.25)) / 1e6 = $0.02617; each later turn reads 9276 fewer cached: $0.00116, break-even
    # 22.6 turns. Within the 52 the conversation had had (the session ended 11 turns later), but
    # the 9276 excess took 16.3 turns to grow: a later, larger cut costs less (22.6 > 8.2).
    small = Outlook(
        prompt_tokens=32_042,
        compacted_tokens=22_766,
        summary_input_tokens=11_224,
        summary_output_tokens=1_122,
        growth_per_turn=568,
        remaining_turns=52,
        cache_warm=True,
    )
    decision = decide(small, GPT5, summarizer_price=MINI)
    assert decision.break_even_turns == pytest.approx(26_170.05 / 1_159.5)
    assert not decision.compact and decision.reason == "does-not-pay"
    # Cut to 10000 the same prompt repays its K of $0.01021 in 3.7 turns, within 19.4: compact.
    assert decide(replace(small, compacted_tokens=10_000), GPT5, summarizer_price=MINI).compact


def test_a_cut_held_back_for_later_is_made_now_when_a_token_trigger_comes_first() -> None:
    """Waiting for a larger cut assumes the conversation goes on growing; a token trigger a few
    turns away compacts it regardless of price, so the choice is now or at that trigger. Held
    back, the cut came at the trigger (its summary made ahead, used for the last turns) and the
    told-prices coding agent cost more than sending direct."""
    # The --quick coding agent at turn 28 under gpt-5 (summarizing itself), 50k window: 32506
    # tokens to 8807 by a summary of 25687 read, 1024 written, 1007 a turn. K = (25687*1.25 +
    # 1024*10 + 8807*1.25 - (31499*0.125 + 1007*1.25)) / 1e6 = $0.04816, each later turn reads
    # 23699 fewer cached: $0.00296, break-even 16.3 turns: beyond the 11.8 its excess took to
    # grow by half, so with no trigger ahead it waits.
    cut = outlook(prompt_tokens=32_506, compacted_tokens=8_807, summary_input_tokens=25_687)
    cut = replace(cut, summary_output_tokens=1_024, growth_per_turn=1_007, remaining_turns=28)
    waits = decide(cut, GPT5)
    assert waits.break_even_turns == pytest.approx(16.26, abs=0.01)
    assert not waits.compact and waits.reason == "does-not-pay"
    # context_fraction 0.8 of the window fires at 40000 tokens, 7.4 turns away: before the later
    # cut, so compacting now (repaid within the 23.5 + 7.4 turns until the compacted prompt
    # reaches the trigger again) is the better of the two.
    soon = replace(cut, trigger_turns=turns_to_reach(32_506, 40_000, 1_007))
    decision = decide(soon, GPT5)
    assert decision.compact and decision.reason == "pays"
    # A trigger far beyond the later cut changes nothing: the wait is still worth it.
    assert not decide(replace(cut, trigger_turns=40), GPT5).compact
    # Nor does a trigger make a cut that never repays within the turns to come pay.
    assert not decide(replace(soon, remaining_turns=10), GPT5).compact


def test_a_trigger_one_turn_away_does_not_justify_a_cut_repaid_over_many_cycles() -> None:
    """Compacting one turn before a trigger moves every later compaction one turn earlier: worth
    it only when the break-even is within the cycle the cut starts (its excess's growth plus the
    turns to the trigger), not merely within the turns to come."""
    # The 10k-excess case above (break-even 7.98 turns, 6.7 turns of growth): a trigger 1 turn
    # away gives a cycle of 7.7 turns, shorter than the break-even: it waits for the trigger.
    soon = grown_back(trigger_turns=1)
    assert not decide(soon, GPT41, summarizer_price=MINI).compact
    # Two turns away the cycle is 8.7 turns: compact now.
    assert decide(replace(soon, trigger_turns=2), GPT41, summarizer_price=MINI).compact
