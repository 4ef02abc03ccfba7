"""Where windows come from (config, learned, discovered, built-in), read from the shapes real
servers answer with, and the calibration factor's arithmetic."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator

import pytest

from proxy.compaction.models.calibration import (
    Calibration,
    calibrated_policy,
    effective_window,
    prompt_tokens,
)
from proxy.compaction.models.window_sources import entry_window, find_entry, window_from_error
from proxy.compaction.models.windows import ModelWindows, relies_on_window, startup_warnings
from proxy.config.settings import CalibrationSettings, Settings, parse_settings
from proxy.core.policy import PolicySettings
from proxy.proxying.responses import BufferedResponse, ResponseTail

# --- /models entries, as each server writes them ---------------------------------------------


def test_vllm_states_max_model_len() -> None:
    entry = {"id": "Qwen/Qwen2.5-7B", "object": "model", "owned_by": "vllm", "max_model_len": 8192}
    assert entry_window(entry) == 8192


def test_openrouter_takes_the_smaller_of_model_and_routed_provider() -> None:
    entry = {"id": "x/y", "context_length": 131072, "top_provider": {"context_length": 65536}}
    assert entry_window(entry) == 65536


def test_llama_cpp_meta_and_litellm_model_info() -> None:
    assert entry_window({"id": "m.gguf", "meta": {"n_ctx_train": 131072, "n_vocab": 1}}) == 131072
    assert entry_window({"id": "m", "meta": {"n_ctx_train": 131072, "n_ctx": 4096}}) == 4096
    assert entry_window({"id": "m", "model_info": {"max_input_tokens": 200000}}) == 200000


def test_entries_without_a_window_state_none() -> None:
    assert entry_window({"id": "gpt-4o", "object": "model", "owned_by": "system"}) is None
    assert entry_window({"id": "m", "max_model_len": True}) is None
    assert entry_window({"id": "m", "max_model_len": "4096"}) is None


def test_find_entry_by_id_or_llama_cpp_single_model() -> None:
    listing = {"data": [{"id": "a", "max_model_len": 1024}, {"id": "b"}]}
    assert find_entry(listing, "a") == {"id": "a", "max_model_len": 1024}
    assert find_entry(listing, "c") is None
    llama = {"data": [{"id": "../models/llama.gguf", "meta": {"n_ctx_train": 8192}}]}
    assert find_entry(llama, "any-name-the-client-chose") is not None
    assert find_entry([{"id": "a"}], "a") == {"id": "a"}  # a bare list
    assert find_entry({"error": "nope"}, "a") is None


# --- overflow answers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "window"),
    [
        (  # OpenAI
            b'{"error":{"message":"This model\'s maximum context length is 128000 tokens. However,'
            b' your messages resulted in 130000 tokens.","code":"context_length_exceeded"}}',
            128000,
        ),
        (  # vLLM
            b'{"object":"error","message":"This model\'s maximum context length is 4096 tokens. '
            b'However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).",'
            b'"type":"BadRequestError","code":400}',
            4096,
        ),
        (  # llama.cpp
            b'{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context'
            b' size (4096 tokens)","type":"exceed_context_size_error","n_prompt_tokens":4476,'
            b'"n_ctx":4096}}',
            4096,
        ),
        (  # Anthropic
            b'{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too '
            b'long: 191989 tokens > 180000 maximum"}}',
            180000,
        ),
        (b'{"error":{"message":"context window exceeded","code":"context_length_exceeded"}}', None),
    ],
)
def test_windows_stated_by_overflow_answers(body: bytes, window: int | None) -> None:
    assert window_from_error(body) == window


# --- resolution order ---------------------------------------------------------------------------


def _windows(yaml_text: str = "") -> ModelWindows:
    settings = parse_settings(yaml_text, environ={})
    return ModelWindows(settings.models, settings.upstream)


def test_built_in_families_and_config_overrides() -> None:
    windows = _windows()
    assert windows.resolve("claude-sonnet-4-5").context_window == 200_000
    assert windows.resolve("anthropic/claude-3.5-sonnet").source == "built-in"
    assert windows.resolve("gemini-2.5-pro").context_window == 1_048_576
    assert windows.resolve("meta-llama/Llama-3.1-8B-Instruct").context_window == 131_072
    assert windows.resolve("Qwen/Qwen2.5-7B-Instruct").context_window == 32_768
    assert windows.resolve("mistral-large-latest").context_window == 131_072
    assert windows.resolve("deepseek-chat").context_window == 131_072
    assert windows.resolve("gpt-4o-mini").context_window == 128_000
    assert windows.resolve("acme-7b").source == "unknown"

    configured = _windows(
        'models: {"*llama-3.1*": {context_window: 8192}, "acme*": {context_window: 999}}'
    )
    assert configured.resolve("llama-3.1-8b") == configured.resolve("llama-3.1-70b")
    assert configured.resolve("llama-3.1-8b").context_window == 8192
    assert configured.resolve("llama-3.1-8b").source == "config"
    assert configured.resolve("acme-7b").context_window == 999


def test_learned_beats_discovered_and_built_in_and_caps_config() -> None:
    windows = _windows('models: {"big*": {context_window: 100000}}')
    overflow = b'{"error":{"message":"maximum context length is 4096 tokens"}}'
    assert windows.learn("llama-3.1-8b", 400, overflow) == 4096
    assert windows.resolve("llama-3.1-8b").source == "learned"
    assert windows.learn("big-model", 400, overflow) == 4096
    assert windows.resolve("big-model").context_window == 4096  # the provider proved it smaller
    assert windows.learn("x", 500, overflow) is None  # not an overflow answer
    assert windows.learn("x", 400, b'{"error":{"message":"bad tool schema"}}') is None


def test_policies_that_depend_on_a_window_are_named_at_start_up() -> None:
    settings = Settings(
        policies={
            "default": PolicySettings(),
            "counted": PolicySettings(trigger={"interactions": 5}),
            "frozen": PolicySettings(strategy="off"),
        }
    )
    assert relies_on_window(settings.policies["default"])
    assert not relies_on_window(settings.policies["counted"])
    (line,) = startup_warnings(settings)
    assert "'default'" in line and "/models" in line


# --- discovery, with a fake upstream -----------------------------------------------------------


class _Upstream:
    def __init__(self, routes: dict[str, tuple[int, object]]) -> None:
        self.routes, self.asked = routes, []

    async def send(self, method: str, url: str, headers: list, body: object) -> BufferedResponse:
        self.asked.append(url)
        status, data = self.routes.get(url, (404, {}))
        return BufferedResponse(status, [], json.dumps(data).encode())


def _discover(
    upstream: _Upstream, model: str, yaml_text: str = "", *, discover: bool = True
) -> ModelWindows:
    text = f"upstream: {{base_url: http://llm:8080/v1, discover_windows: {discover}}}\n"
    text += yaml_text
    settings = parse_settings(text, environ={})
    windows = ModelWindows(settings.models, settings.upstream, client=lambda: upstream)

    async def go() -> None:
        windows.want(model, {"authorization": "Bearer k"}, PolicySettings())
        await asyncio.gather(*windows._tasks.values())

    asyncio.run(go())
    return windows


def test_llama_cpp_served_context_comes_from_props() -> None:
    upstream = _Upstream(
        {
            "http://llm:8080/v1/models": (
                200,
                {"data": [{"id": "m.gguf", "meta": {"n_ctx_train": 131072}}]},
            ),
            "http://llm:8080/props": (200, {"default_generation_settings": {"n_ctx": 4096}}),
        }
    )
    windows = _discover(upstream, "local")
    assert windows.resolve("local").context_window == 4096
    assert windows.resolve("local").source == "discovered"


def test_hosted_families_and_configured_models_are_not_looked_up() -> None:
    upstream = _Upstream({})
    _discover(upstream, "gpt-4o")
    _discover(upstream, "claude-sonnet-4-5")
    _discover(upstream, "mine", 'models: {"mine": {context_window: 1000}}')
    _discover(upstream, "acme", discover=False)
    assert upstream.asked == []
    _discover(upstream, "acme")
    assert upstream.asked == ["http://llm:8080/v1/models"]  # only an unknown model, when on


# --- calibration --------------------------------------------------------------------------------


def test_the_factor_converges_within_its_bounds_and_ignores_nonsense() -> None:
    calibration = Calibration(CalibrationSettings())
    assert calibration.factor("m") == 1.0
    for _ in range(20):
        assert calibration.observe("m", counted=1000, reported=1300)
    assert calibration.factor("m") == pytest.approx(1.3)
    assert not calibration.observe("m", counted=100, reported=500)  # too small to say
    assert not calibration.observe("m", counted=1000, reported=10)  # not this prompt's count
    assert not calibration.observe("m", counted=1000, reported=None)
    assert calibration.factor("m") == pytest.approx(1.3)
    for _ in range(50):
        calibration.observe("w", counted=1000, reported=3500)
    assert calibration.factor("w") == 2.0  # bounded by max_factor


def test_a_disabled_calibration_keeps_counts_as_they_are() -> None:
    calibration = Calibration(CalibrationSettings(enabled=False))
    calibration.observe("m", counted=1000, reported=1300)
    assert calibration.factor("m") == 1.0


def test_calibrated_thresholds_and_windows_are_in_counted_tokens() -> None:
    policy = PolicySettings(
        trigger={"input_tokens": 13000, "interaction_tokens": 2600}, keep={"tokens": 1300}
    )
    scaled = calibrated_policy(policy, 1.3)
    assert scaled.trigger.input_tokens == 10000
    assert scaled.trigger.interaction_tokens == 2000
    assert scaled.keep.tokens == 1000
    assert scaled.trigger.context_fraction == policy.trigger.context_fraction
    calibration = Calibration(CalibrationSettings())
    assert calibration.policy(policy, "m") is policy
    calibration.observe("m", counted=1000, reported=1300)
    assert calibration.policy(policy, "m") == scaled
    assert calibration.policy(policy, "m") is calibration.policy(policy, "m")
    assert effective_window(4096, 1.3) == 3150


def test_usage_is_read_from_the_end_of_json_and_sse_bodies() -> None:
    body = b'{"choices":[{"message":{"content":"\\"prompt_tokens\\": 1"}}],"usage":{"prompt_tokens":812,"completion_tokens":5}}'
    assert prompt_tokens(body) == 812
    sse = b'data: {"choices":[]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":77}}\n\ndata: [DONE]\n\n'
    assert prompt_tokens(sse) == 77
    assert prompt_tokens(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n') is None


def test_the_tail_of_a_gzipped_stream_is_kept_while_relayed() -> None:
    payload = b"x" * 50_000 + b'{"usage":{"prompt_tokens":4242}}'
    compressed = gzip.compress(payload)
    chunks = [compressed[i : i + 1000] for i in range(0, len(compressed), 1000)]

    class Streamed(BufferedResponse):
        async def iter_raw(self) -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

    tail = ResponseTail(Streamed(200, [(b"Content-Encoding", b"gzip")], b""))

    async def relay() -> bytes:
        return b"".join([c async for c in tail.iter_raw()])

    assert asyncio.run(relay()) == compressed  # relayed as it came
    assert prompt_tokens(tail.tail()) == 4242


def test_a_long_answer_keeps_its_head_beside_its_tail() -> None:
    """An Anthropic stream's input figures are in its first event."""
    head = b'event: message_start\ndata: {"message":{"usage":{"input_tokens":7}}}\n\n'
    payload = head + b"x" * 50_000 + b'{"usage":{"output_tokens":3}}'
    chunks = [payload[i : i + 1000] for i in range(0, len(payload), 1000)]

    class Streamed(BufferedResponse):
        async def iter_raw(self) -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

    tail = ResponseTail(Streamed(200, [], b""))

    async def relay() -> bytes:
        return b"".join([c async for c in tail.iter_raw()])

    assert asyncio.run(relay()) == payload
    kept = tail.tail()
    assert kept.startswith(head) and kept.endswith(b'{"usage":{"output_tokens":3}}')
    assert len(kept) < 16_384
    short = ResponseTail(Streamed(200, [], b""))
    chunks[:] = [b'{"usage":{"prompt_tokens":5}}']
    asyncio.run(_drain(short))
    assert short.tail() == b'{"usage":{"prompt_tokens":5}}'  # a short body once, not twice


async def _drain(response: ResponseTail) -> None:
    async for _ in response.iter_raw():
        pass


def test_the_start_up_warning_says_a_priced_model_is_also_compacted_by_price() -> None:
    """The default policy also fires by price (trigger.pays): the warning must not say it
    compacts only on context_fraction."""
    settings = Settings(
        policies={
            "default": PolicySettings(),
            "windowed": PolicySettings(trigger={"pays": False}),
        }
    )
    by_policy = {line.split("'")[1]: line for line in startup_warnings(settings)}
    assert "only on context_fraction" not in by_policy["default"]
    assert "pricing" in by_policy["default"] and "/models" in by_policy["default"]
    assert "only on context_fraction" in by_policy["windowed"]
