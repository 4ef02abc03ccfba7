"""The ``X-Compaction-*`` headers: every name the proxy reads from a client or adds to its answer,
and how their values are written (docs/operations.md). Nothing else spells these names.

Request headers (the client's): ``X-Compaction: off`` skips compaction for one request,
``X-Compaction-Policy`` names a policy, ``X-Compaction-Checkpoint`` pins a checkpoint
(``proxy.compaction.summaries.pinning``), ``X-Compaction-Focus`` steers the summary made for the request
(``proxy.compaction.summaries.focus``). None of them reaches the provider.

Response headers (ours): ``X-Compaction`` says what happened (``applied``, ``skipped``,
``pending``, ``blocked``, ``failed``, ``off``; ``answered`` when the proxy answered an agent's own
compaction itself, docs/agent-compaction.md), with the tokens before and after, the checkpoint
applied and the policy; ``X-Compaction-Applied`` what the provider's prompt holds instead of the
client's turns (``summary``, ``stubs``, ``dropped``, joined by ``+``: ``summary+stubs``), absent
when it holds them as they came; ``X-Compaction-Warning`` when the policy's numbers cannot do
what the request needed (``headroom``: the fixed prompt leaves a compaction no room to grow
before the next summary starts; proxy.core.headroom); ``X-Compaction-Retried`` when an overflow
was retried compacted harder;
``X-Compaction-Ledger`` (a policy's ``ledger_header``) the conversation's dollars so far;
under ``strategy: native``, ``X-Compaction-Strategy`` (what ran) and ``X-Compaction-Native``
(what the provider did); ``X-Compaction-Warning: unpriced-model`` when ``trigger.pays`` is on
and the model has no price, with ``; reference=IN/CACHED/WRITE/OUT`` (dollars per million) when
the price trigger decides at ``pricing.reference`` instead (without it the token thresholds alone
decide);
``X-Compaction-Recalls`` and ``X-Compaction-Recall-Tokens`` when the proxy answered the model's
recall calls (rounds, and the tokens they were billed; a stream that recalls after its text says
the rounds in an SSE comment, ``: x-compaction-recalls N``).

The names a client uses for its conversation (``X-Conversation-Id`` and the agents' session
headers) are a setting's default: they are spelled once, in ``proxy.config.store``, which this
package reads and which cannot import it.
"""

from __future__ import annotations

from proxy.core.plan import Plan
from proxy.economics.prices import Price
from proxy.types import HeaderView, RawHeaders

PREFIX = "x-compaction"  # every header of ours starts so: never forwarded upstream
SWITCH = "x-compaction"  # request: "off"; response: the outcome
POLICY = "x-compaction-policy"  # request: the policy asked for; response: the one applied
CHECKPOINT = "x-compaction-checkpoint"  # request: a pin; response: the checkpoint applied
TOKENS_BEFORE = "x-compaction-tokens-before"
TOKENS_AFTER = "x-compaction-tokens-after"
RETRIED = "x-compaction-retried"
LEDGER = "x-compaction-ledger"  # response: the conversation's dollars so far (ledger_header)
FOCUS = "x-compaction-focus"  # request: one line for the summary this request makes
STRATEGY = "x-compaction-strategy"  # response: the strategy that ran (native, or its fallback)
NATIVE = "x-compaction-native"  # response: what the provider's own compaction did
APPLIED = "x-compaction-applied"  # response: summary, stubs, dropped, joined by "+"
RECALLS = "x-compaction-recalls"  # response: recall rounds run for this answer
RECALL_TOKENS = "x-compaction-recall-tokens"  # response: the tokens those rounds were billed
WARNING = "x-compaction-warning"  # response: the policy's numbers fall short (headroom,
# unpriced-model: trigger.pays is on but the model has no price; decided at pricing.reference)

ANSWERED = "answered"  # response: an agent's own compaction, answered by the proxy itself

# As errors name them (the case the docs write).
POLICY_PARAM = "X-Compaction-Policy"
CHECKPOINT_PARAM = "X-Compaction-Checkpoint"
FOCUS_PARAM = "X-Compaction-Focus"

# The summary webhook's own headers (proxy/ops/export/webhook.py): a delivery, not a request.
WEBHOOK_SIGNATURE = "X-Compaction-Signature"
WEBHOOK_DELIVERY = "X-Compaction-Delivery"
WEBHOOK_EVENT = "X-Compaction-Event"

_SWITCH = SWITCH.encode()
_POLICY = POLICY.encode()
_CHECKPOINT = CHECKPOINT.encode()
_TOKENS_BEFORE = TOKENS_BEFORE.encode()
_TOKENS_AFTER = TOKENS_AFTER.encode()
_RETRIED = (RETRIED.encode(), b"context_length_exceeded")
_LEDGER = LEDGER.encode()
_APPLIED = APPLIED.encode()
_WARNING = WARNING.encode()
STRATEGY_BYTES = STRATEGY.encode()
NATIVE_BYTES = NATIVE.encode()
RECALLS_BYTES = RECALLS.encode()
RECALL_TOKENS_BYTES = RECALL_TOKENS.encode()


def unpriced_warning(reference: Price | None) -> tuple[bytes, bytes]:
    """``X-Compaction-Warning`` for a model without a price: with the reference prices the
    price trigger assumed instead, dollars per million (input/cached/write/output)."""
    if reference is None:
        return (_WARNING, b"unpriced-model")
    figures = (reference.input, reference.cached_input, reference.cache_write, reference.output)
    return (_WARNING, b"unpriced-model; reference=" + "/".join(map(_dollars, figures)).encode())


def _dollars(value: float) -> str:
    return f"{value:g}"


def switched_off(headers: HeaderView) -> bool:
    """The client sent ``X-Compaction: off``."""
    return (headers.get(SWITCH) or "").strip().lower() == "off"


def asked_policy(headers: HeaderView) -> str | None:
    """The policy ``X-Compaction-Policy`` names, or None."""
    return headers.get(POLICY)


def pinned_checkpoint(headers: HeaderView) -> str | None:
    """The checkpoint id a request pins, or None (absent or empty)."""
    return (headers.get(CHECKPOINT) or "").strip() or None


def response_headers(
    outcome: str, plan: Plan | None = None, *, policy: str | None = None, retried: bool = False
) -> RawHeaders:
    """What the client's answer carries about compaction."""
    headers = [(_SWITCH, outcome.encode())]
    if plan is not None:
        headers += [
            (_TOKENS_BEFORE, str(plan.tokens_before).encode()),
            (_TOKENS_AFTER, str(plan.tokens_after).encode()),
            (_CHECKPOINT, (plan.applied_checkpoint or "").encode()),
        ]
        parts = applied_parts(plan)
        if parts:
            headers.append((_APPLIED, parts.encode()))
        if plan.headroom_short is not None:
            headers.append((_WARNING, headroom_warning(*plan.headroom_short).encode()))
    if policy is not None:
        headers.append((_POLICY, policy.encode()))
    if retried:
        headers.append(_RETRIED)
    return headers


def answered_headers(tokens_before: int, checkpoint: str | None, policy: str) -> RawHeaders:
    """An agent's own compaction the proxy answered itself: nothing reached the provider."""
    return [
        (_SWITCH, ANSWERED.encode()),
        (_TOKENS_BEFORE, str(tokens_before).encode()),
        (_TOKENS_AFTER, b"0"),
        (_CHECKPOINT, (checkpoint or "").encode()),
        (_POLICY, policy.encode()),
    ]


def applied_parts(plan: Plan) -> str:
    """``X-Compaction-Applied``'s value (and the metrics' ``applied`` label): what the plan
    sends instead of the client's turns, ``""`` when nothing."""
    return "+".join(plan.applied_parts)


def headroom_warning(fixed_tokens: int, next_summary_at: int) -> str:
    """``X-Compaction-Warning``'s value for a compaction that cannot leave room to grow."""
    return f"headroom; fixed_tokens={fixed_tokens}; next_summary_at={next_summary_at}"


def ledger_header(
    requests: int, spent: float, summarizer: float, saved: float
) -> tuple[bytes, bytes]:
    """``X-Compaction-Ledger``: a conversation's totals in dollars, up to its previous answer
    (an answer's own usage is known only at its end, after the headers went out)."""
    value = (
        f"requests={requests}; spent={spent:.6f}; summarizer={summarizer:.6f}; saved={saved:.6f}"
    )
    return _LEDGER, value.encode()


# Each answer header of ours as the request's span names it (``proxy.tracing``).
_SPAN_NAMES = {
    _SWITCH: "compaction.outcome",
    _POLICY: "compaction.policy",
    _CHECKPOINT: "compaction.checkpoint",
    _TOKENS_BEFORE: "compaction.tokens_before",
    _TOKENS_AFTER: "compaction.tokens_after",
    _APPLIED: "compaction.applied",
    _WARNING: "compaction.warning",
    _RETRIED[0]: "compaction.retried",
}


def span_attributes(headers: RawHeaders) -> dict[str, str | int]:
    """What the answer's ``X-Compaction-*`` headers say, as span attributes (token counts as
    numbers; an empty checkpoint left out)."""
    found: dict[str, str | int] = {}
    for name, value in headers:
        key = _SPAN_NAMES.get(name)
        if key is None or not value:
            continue
        text = value.decode("latin-1")
        found[key] = int(text) if key.startswith("compaction.tokens") else text
    return found
