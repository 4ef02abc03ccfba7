"""What config/examples/coding-agent.yaml keeps verbatim after a summary, as a user would meet it
through the cost bench (``tests.bench.cost``, ``--mode users``).

Every message the recipe pins or keeps is written again after each summary and read on every
later turn: what it keeps is paid for, so it keeps what an agent needs, not a whole chat."""

from __future__ import annotations

from proxy.config.settings import parse_settings
from proxy.core.interactions import group
from proxy.core.pins import pinned
from proxy.core.policy import PolicySettings
from tests.support.messages import assistant, system, user
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
