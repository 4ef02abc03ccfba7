"""Built-in synthetic transcripts with planted answers: a coding agent, a long chat, a research
session.

Each is generated deterministically from a seed: the same options give the same messages and
probes, so runs compare. Every probe's answer is planted in a known message, mostly early (what
a compaction summarizes), with filler after it that holds none of the answers; one fact is
planted at the very end, which any strategy keeps. Known answers are single words or identifiers
(paths, ids, numbers, URLs), so a normalised match scores them without a judge.
"""

from __future__ import annotations

import json
import random
from typing import Any

from proxy.tools.evaluation.probes import Probe
from proxy.tools.evaluation.transcripts import Transcript

# Answers come from these pools; filler text never uses them, so a match means the answer.
_CODEWORDS = ("Marmalade", "Juniper", "Obsidian", "Tangerine", "Quartz", "Lantern", "Saffron",
              "Heron", "Cobalt", "Thistle", "Walnut", "Bramble", "Falcon", "Pebble", "Cinder",
              "Willow", "Glacier", "Indigo", "Kestrel", "Lilac", "Nutmeg", "Orchid", "Sorrel",
              "Tundra", "Velvet", "Yarrow", "Zephyr", "Larkspur", "Mistral", "Paprika")  # fmt: skip
_SURNAMES = ("Halvorsen", "Okonkwo", "Castellanos", "Lindqvist", "Nakashima", "Abernethy",
             "Delacroix", "Vukovic")  # fmt: skip
_PARTY_JOBS = ("harpist", "magician", "photographer", "florist", "caricaturist", "juggler")
_FLAVOURS = ("pistachio", "hazelnut", "elderflower", "blackcurrant", "cardamom")
# Filler: plain words, no digits of three or more, nothing from the pools above.
_FILLER_WORDS = ("value", "request", "handler", "config", "result", "buffer", "session", "client",
                 "record", "index", "update", "check", "token", "queue", "event", "cache",
                 "order", "amount", "status", "field", "error", "retry", "timeout", "limit")  # fmt: skip
_TOPICS = ("music", "decorations", "games", "seating", "lighting", "drinks", "weather",
           "parking", "speeches", "dress code", "gifts", "photos")  # fmt: skip


class _Builder:
    """Messages and probes, with tool calls whose ids are deterministic."""

    def __init__(self, rng: random.Random, system: str, *, words: slice) -> None:
        self.rng = rng
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        self.probes: list[Probe] = []
        # Each transcript draws from its own part of the pool: no answer of one is in another.
        self._pool = list(_CODEWORDS[words])
        rng.shuffle(self._pool)

    def word(self) -> str:
        return self._pool.pop()

    def say(self, role: str, content: str) -> int:
        self.messages.append({"role": role, "content": content})
        return len(self.messages) - 1

    def tool_round(self, content: str, calls: list[tuple[str, dict[str, Any], str]]) -> int:
        """One assistant message calling tools and their results; returns the assistant index."""
        ids = [f"call_{self.rng.getrandbits(64):016x}" for _ in calls]
        self.messages.append(
            {
                "role": "assistant",
                "content": content or None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                    for call_id, (name, args, _) in zip(ids, calls, strict=True)
                ],
            }
        )
        at = len(self.messages) - 1
        for call_id, (_, _, result) in zip(ids, calls, strict=True):
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        return at

    def plant(self, category: str, question: str, answer: str) -> None:
        """A probe whose answer is in the newest message that holds it."""
        planted = next(
            i
            for i in range(len(self.messages) - 1, -1, -1)
            if answer in json.dumps(self.messages[i])
        )
        self.probes.append(Probe(category, question, answer=answer, planted=planted))

    @property
    def rounds(self) -> int:
        return sum(1 for m in self.messages if m.get("tool_calls"))

    def filler(self, lines: int) -> str:
        words = self.rng.choices(_FILLER_WORDS, k=lines * 6)
        return "\n".join(
            f"    {words[i * 6]}_{words[i * 6 + 1]} = {words[i * 6 + 2]}({words[i * 6 + 3]}, "
            f"{words[i * 6 + 4]}.{words[i * 6 + 5]})"
            for i in range(lines)
        )

    def transcript(self, name: str, tools: list[dict[str, Any]] | None = None) -> Transcript:
        return Transcript(name=name, messages=self.messages, probes=tuple(self.probes), tools=tools)


def _function(name: str, **properties: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": v} for k, v in properties.items()},
            },
        },
    }


CODING_TOOLS = [
    _function("read_file", path="string"),
    _function("edit_file", path="string", content="string"),
    _function("grep", pattern="string"),
    _function("run_tests", target="string"),
]
_REPO_FILES = ("src/payments/checkout.py", "src/payments/gateway.py", "src/payments/models.py",
               "tests/test_checkout.py", "tests/conftest.py", "src/payments/api.py")  # fmt: skip


def coding_agent(*, rounds: int = 120, seed: int = 7) -> Transcript:
    """One user task, then ``rounds`` tool rounds (reads, greps, edits, test runs) under it."""
    rng = random.Random(f"coding-{seed}")
    b = _Builder(
        rng,
        "You are a coding agent working in the payments repository. Use the tools to read, "
        "search, edit and test code. Work step by step.",
        words=slice(0, 10),
    )
    ticket = f"PAY-{rng.randint(1000, 9999)}"
    port = str(rng.randint(20000, 65000))
    repo = f"https://git.example.com/acme/payments-{rng.randint(100, 999)}"
    commit_word, step_word, lib_word, rejected, clock_word, mode_a, mode_b = (
        b.word() for _ in range(7)
    )
    library, fixture = f"{lib_word.lower()}retry", f"{clock_word.lower()}_clock"
    helper = f"src/payments/retry_{rng.randint(10, 99)}x.py"
    b.say(
        "user",
        f"Please fix the flaky checkout test in the payments service; the ticket is {ticket}. "
        f"The repository is {repo} and the staging database listens on port {port}. Standing "
        f"rule for this whole task: every commit message must start with the word {commit_word}. "
        "Never touch files under vendor/.",
    )
    b.plant("fact", "Which ticket is this task about?", ticket)
    b.plant("fact", "What is the URL of the repository?", repo)
    b.plant("fact", "On which port does the staging database listen?", port)
    b.plant("instruction", "With which word must every commit message start?", commit_word)
    b.tool_round(
        "Plan: 1. reproduce the failure with the test runner; 2. find the source of the "
        f"flakiness; 3. fix it with a retry helper; 4. regenerate the {step_word} fixtures and "
        "run the whole suite.",
        [("run_tests", {"target": "tests/test_checkout.py"}, "FAILED test_charge: TimeoutError")],
    )
    b.plant("next_step", "Step 3 of the agent's plan is done: what is the next step?", step_word)
    b.tool_round("", [("read_file", {"path": _REPO_FILES[0]}, b.filler(12))])
    b.tool_round(
        f"Decision: the retries use the {library} library rather than {rejected.lower()}retry, "
        f"which has no async support. The test will freeze time with the {fixture} fixture "
        "instead of sleeping.",
        [("edit_file", {"path": helper, "content": f"from {library} import retry\n"}, "written")],
    )
    b.plant("decision", "Which library did the agent decide to use for the retries?", library)
    b.plant("decision", "Which fixture did the agent decide to use to freeze time?", fixture)
    b.plant("artifact", "Which new file did the agent create for the retry helper?", helper)
    settings = "src/payments/settings.py"
    b.tool_round("", [("edit_file", {"path": settings, "content": f'MODE = "{mode_a}"'}, "ok")])
    for _ in range(2):
        b.tool_round("", [("grep", {"pattern": "MODE"}, b.filler(4))])
    b.tool_round(
        "Switching MODE to the safer value.",
        [("edit_file", {"path": settings, "content": f'MODE = "{mode_b}"'}, "ok")],
    )
    b.plant("artifact", f"After the agent's last edit, what is MODE set to in {settings}?", mode_b)
    for i in range(max(0, rounds - b.rounds - 1)):
        path = _REPO_FILES[i % len(_REPO_FILES)]
        if i % 3 == 2:
            b.tool_round("", [("run_tests", {"target": path}, b.filler(3))])
        elif i % 3 == 1:
            b.tool_round(
                "Looking at both." if i % 2 else "",
                [
                    ("read_file", {"path": path}, b.filler(6)),
                    ("grep", {"pattern": rng.choice(_FILLER_WORDS)}, b.filler(2)),
                ],
            )
        else:
            b.tool_round("", [("read_file", {"path": path}, b.filler(8))])
    build = str(rng.randint(10000, 99999))
    b.tool_round("", [("run_tests", {"target": "tests"}, f"build {build}: all tests passed")])
    b.plant("fact", "Which build number did the last test run report?", build)
    b.say("assistant", "Step 3 is done: the retry helper is in place and the suite passes.")
    return b.transcript("coding-agent", CODING_TOOLS)


def long_chat(*, turns: int = 60, seed: int = 7) -> Transcript:
    """A user planning a party with an assistant over ``turns`` exchanges."""
    rng = random.Random(f"chat-{seed}")
    b = _Builder(rng, "You are a friendly assistant helping to plan an event.", words=slice(10, 20))
    name, district, venue_a, venue_b, subject_a, subject_b = (b.word() for _ in range(6))
    job = rng.choice(_PARTY_JOBS)
    flavour = rng.choice(_FLAVOURS)
    reference = f"HALL-{rng.randint(10000, 99999)}"
    budget = str(rng.randint(2000, 9000))
    guests = f"guests_{rng.randint(10, 99)}.csv"
    b.say(
        "user",
        f"Hi! I'm organising my sister's birthday party; you can call me {name}. One rule for "
        f"the whole chat: only ever suggest shops in the {district} district.",
    )
    b.plant("fact", "What name did the user ask to be called?", name)
    b.plant("instruction", "In which district must every shop the assistant suggests be?", district)
    b.say("assistant", f"Happy to help, {name}! I will keep every shop suggestion local.")
    b.say(
        "user",
        f"The booking reference for the hall is {reference} and the budget is {budget} euros. "
        f"The order of things: first the venue, then the cake, then the invitations, then we book "
        f"the {job}.",
    )
    b.plant("fact", "What is the booking reference of the hall?", reference)
    b.plant("fact", "What is the budget, in euros?", budget)
    b.plant("next_step", "The invitations are done: what is the next thing to book?", job)
    b.say("assistant", "Noted: venue, cake, invitations, and then the last booking.")
    b.say("user", f"For the venue we are torn between the {venue_a} Hall and the {venue_b} Hall.")
    b.say(
        "assistant",
        f"Decision: let's take the {venue_b} Hall, because it has a garden and step-free access. "
        f"For the cake, {flavour} it is, as your sister loves it.",
    )
    b.plant("decision", "Which hall did they decide to take?", venue_b)
    b.plant("decision", "Which cake flavour did they decide on?", flavour)
    b.say("user", "Please draft the invitation and save the guest list.")
    b.say("assistant", f'Draft invitation, subject: "{subject_a} Party". Guest list saved.')
    b.say("user", f'Change the subject to "{subject_b} Night" please; save the list as {guests}.')
    b.say("assistant", f'Updated invitation, subject: "{subject_b} Night". Saved as {guests}.')
    b.plant("artifact", "What is the subject line of the latest version of the invitation?", subject_b)  # fmt: skip
    b.plant("artifact", "Under which file name is the guest list saved?", guests)
    for i in range(max(0, turns - 6)):
        topic = _TOPICS[i % len(_TOPICS)]
        b.say("user", f"What do you think about the {topic}? Any ideas?")
        b.say("assistant", f"For the {topic}, keep it simple.\n{b.filler(3)}")
    code = str(rng.randint(1000, 9999))
    b.say("user", f"The invitations are done! The caretaker just texted: the door code is {code}.")
    b.plant("fact", "What is the door code the caretaker texted?", code)
    b.say("assistant", "Wonderful, the invitations are out. Noted the code.")
    return b.transcript("long-chat")


RESEARCH_TOOLS = [_function("search", query="string"), _function("write_notes", path="string")]


def research_session(*, documents: int = 24, seed: int = 7) -> Transcript:
    """A literature review: searches returning documents, notes written, a draft planned."""
    rng = random.Random(f"research-{seed}")
    b = _Builder(
        rng,
        "You are a research assistant with a search tool and a notes file.",
        words=slice(20, 30),
    )
    city, style, kept, excluded, heading_a, heading_b = (b.word() for _ in range(6))
    reviewer = rng.choice(_SURNAMES)
    peak = f"{rng.randint(3, 9)}.{rng.randint(1, 9)}"
    dataset = f"https://data.example.org/heat/{rng.randint(1000, 9999)}"
    notes = f"research/notes_{rng.randint(10, 99)}.md"
    b.say(
        "user",
        f"I need a literature review on urban heat islands for the {city} city council. Standing "
        f"instruction: write everything in the {style} house style.",
    )
    b.plant("instruction", "In which house style must everything be written?", style)
    b.plant("fact", "For which city council is the review?", city)
    b.tool_round(
        "Plan: 1. search for recent studies; 2. read and compare them; 3. draft the summary "
        f"table; 4. send the draft to Dr {reviewer} for review.",
        [
            (
                "search",
                {"query": "urban heat island field studies"},
                f"[doc-1] The {kept} Survey: a field study measuring a peak difference of {peak} "
                f"degrees between centre and suburbs. Dataset: {dataset}\n"
                f"[doc-2] The {excluded} Study: a small pilot of two sites.",
            )
        ],
    )
    b.plant("next_step", "Step 3 of the plan is done: who should receive the draft next?", reviewer)
    b.plant("fact", "What peak temperature difference did the field study measure?", peak)
    b.plant("fact", "At which URL is the field study's dataset?", dataset)
    b.tool_round(
        f"Decision: exclude the {excluded} Study, because two sites are too few; keep the "
        f"{kept} Survey as the main source.",
        [("write_notes", {"path": notes, "content": f"## {heading_a}"}, "saved")],
    )
    b.plant("decision", "Which study did the assistant decide to exclude?", excluded)
    b.plant("decision", "Which study is kept as the main source?", kept)
    b.plant("artifact", "Which file holds the research notes?", notes)
    b.tool_round("", [("write_notes", {"path": notes, "content": f"## {heading_b}"}, "saved")])
    b.plant("artifact", "What is the heading of the last section written to the notes?", heading_b)
    for i in range(max(0, documents - 2)):
        topic = rng.choice(_FILLER_WORDS)
        b.tool_round(
            "Reading further." if i % 2 else "",
            [("search", {"query": f"heat island {topic}"}, b.filler(16))],
        )
        b.say("assistant", f"Nothing new on {topic}.")
        b.say("user", "Keep going.")
    quota = str(rng.randint(1000, 9999))
    b.tool_round("", [("search", {"query": "quota"}, f"search quota remaining: {quota} queries")])
    b.plant("fact", "How many search queries does the quota have left?", quota)
    b.say("assistant", "Step 3 is done: the summary table is drafted.")
    return b.transcript("research-session", RESEARCH_TOOLS)


BUILTIN = ("coding-agent", "long-chat", "research-session")


def builtin_transcripts(
    *, rounds: int = 120, turns: int = 60, documents: int = 24, seed: int = 7
) -> list[Transcript]:
    return [
        coding_agent(rounds=rounds, seed=seed),
        long_chat(turns=turns, seed=seed),
        research_session(documents=documents, seed=seed),
    ]
