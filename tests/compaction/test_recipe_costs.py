"""What config/examples/coding-agent.yaml keeps verbatim after a summary, as a user would meet it
through the cost bench (``tests.bench.cost``, ``--mode users``).

Every message the recipe pins or keeps is written again after each summary and read on every
later turn: what it keeps is paid for, so it keeps what an agent needs, not a whole chat."""

from __future__ import annotations

from proxy.config.settings import parse_settings
from proxy.core.interactions import group
from proxy.core.pins import pinned
from proxy.core.planner import plan
from proxy.core.policy import PolicySettings, TriggerSettings
from proxy.core.tokens import TokenCounter
from proxy.types import ChatMessage
from tests.support.messages import assistant, system, tool, user
from tests.support.paths import REPO_ROOT

RECIPE = REPO_ROOT / "config" / "examples" / "coding-agent.yaml"


def recipe() -> PolicySettings:
    return parse_settings(RECIPE.read_text(encoding="utf-8"), environ={}).policies["default"]


def test_a_chat_through_the_coding_agent_recipe_keeps_its_task_not_every_question() -> None:
    """Pinning every user message kept all of a chat's questions verbatim after each summary:
    on the seeded 80-turn chat the compacted prompt grew with the chat (41k of 67k tokens), a
    summary saved ever less, and the recipe cost 0.88x sending direct under gpt-5. The task that
    started the session stays pinned, and whatever carries ``#keep``."""
    messages = [system("You help.")]
    for i in range(40):
        note = " #keep" if i == 30 else ""
        messages += [user(f"question {i}: why is that so?{note}"), assistant(f"answer {i}")]
    assert pinned(messages, group(messages), recipe().pin) == (1, 61)


def test_the_coding_agent_recipe_keeps_at_most_16k_tokens_verbatim() -> None:
    """Each summary writes the kept turns again: with 24k kept, a compaction of the public
    Claude Code sessions over 50k tokens saved a few thousand tokens a turn for a 25k rewrite
    (0.78 / 0.83x direct under gpt-5 / Sonnet on the 105-turn one; 0.73 / 0.75 with 16k)."""
    keep = recipe().keep
    assert keep.tokens is not None and keep.tokens <= 16_000


def _summarized_now(messages: list[ChatMessage]) -> list[ChatMessage]:
    """What the recipe sends verbatim after the summary when it summarizes ``messages`` now."""
    pol = recipe().model_copy(update={"trigger": TriggerSettings(context_fraction=0, messages=1)})
    now = plan(messages, pol, model="gpt-4.1", counter=TokenCounter(), model_info=None, prior=None)
    assert now.summary_request is not None
    return now.with_summary("what came before").messages[2:]


def test_a_chat_through_the_coding_agent_recipe_keeps_its_last_turns_not_16k_tokens() -> None:
    """A chat has no tool round to keep whole: 16k tokens kept verbatim were a dozen of its
    turns, written again after each summary and read on every turn after it (the seeded 80-turn
    chat cost 0.84x sending direct under gpt-5 with 16k kept, 0.77 with its last 4 turns)."""
    answer = "a long answer " * 300  # about 1k tokens a turn
    messages = [system("You help.")]
    for i in range(30):
        messages += [user(f"question {i}: why is that so?"), assistant(f"{answer} {i}")]
    assert _summarized_now(messages) == [messages[1], *messages[-8:]]  # the task is pinned


def test_an_agent_run_through_the_coding_agent_recipe_still_keeps_16k_tokens() -> None:
    """A tool loop keeps its newest rounds by tokens, as before."""
    messages = [system("You code."), user("fix the tests")]
    for i in range(120):  # results under the recipe's min_tokens: none is stubbed
        messages += [
            assistant(None, (f"c{i}", "Bash", '{"command": "grep -r x ."}')),
            tool(f"c{i}", f"round {i} " + "match line " * 100),
        ]
    kept = TokenCounter().count_messages(_summarized_now(messages), "gpt-4.1")
    assert 12_000 < kept <= 16_000


LONG_CHAT = REPO_ROOT / "config" / "examples" / "long-chat.yaml"


def test_a_chat_through_the_long_chat_recipe_keeps_its_last_7_turns() -> None:
    """Every turn kept verbatim is written again after each summary and read on every turn
    after it: with 8 kept, the seeded 80-turn chat cost 0.803x sending direct under gpt-5's
    prices (the goal is 0.80), with 7 0.795x; with 6, the public 65-turn opencode session
    went above direct (1.07-1.09x: its one summary came with its last turns)."""
    policy = parse_settings(LONG_CHAT.read_text(encoding="utf-8"), environ={}).policies["default"]
    policy = policy.model_copy(update={"trigger": TriggerSettings(context_fraction=0, messages=1)})
    messages = [system("You help.")]
    for i in range(30):
        messages += [user(f"question {i}: why is that so?"), assistant(f"answer {i}")]
    now = plan(
        messages, policy, model="gpt-4.1", counter=TokenCounter(), model_info=None, prior=None
    )
    assert now.summary_request is not None
    assert now.with_summary("what came before").messages[2:] == messages[-14:]
