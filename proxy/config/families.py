"""The built-in table of model families: context windows (in tokens) and tiktoken encodings.

The user's ``models:`` table is checked first, so any entry here can be overridden. Windows are
the ones each model's maker publishes. Open-weights families (Llama, Qwen, Mistral, DeepSeek,
Gemma) are marked ``discover``: every server chooses its own window for them (vLLM's
``--max-model-len``, llama.cpp's ``-c``), so the provider's ``/v1/models`` is asked and wins
over this table (proxy/compaction/models/windows.py). Hosted families (OpenAI, Claude, Gemini) are served with the
published window, and their providers' model lists do not say it, so nobody is asked.

Globs start with ``*`` where gateways prefix the name (``anthropic/claude-...`` on OpenRouter,
``anthropic.claude-...`` on Bedrock, ``meta-llama/Llama-3.1-8B-Instruct`` on vLLM); they are
matched case-sensitively, so lower and title case are both listed where servers use both. The
first matching glob wins: specific ones come before their family's catch-all. Non-OpenAI models
are counted with o200k_base, an approximation that calibration corrects (proxy/compaction/models/calibration.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Family:
    glob: str
    context_window: int
    encoding: str = "o200k_base"
    discover: bool = False  # the window depends on the server: ask its /v1/models


def _open(*globs: str, window: int) -> tuple[Family, ...]:
    return tuple(Family(g, window, discover=True) for g in globs)


FAMILIES: tuple[Family, ...] = (
    # OpenAI
    Family("gpt-4o*", 128_000),
    Family("chatgpt-4o*", 128_000),
    Family("gpt-4.1*", 1_047_576),
    Family("gpt-5*", 400_000),
    Family("o1*", 200_000),
    Family("o3*", 200_000),
    Family("o4*", 200_000),
    Family("gpt-4-turbo*", 128_000, "cl100k_base"),
    Family("gpt-4-32k*", 32_768, "cl100k_base"),
    Family("gpt-4*", 8_192, "cl100k_base"),
    Family("gpt-3.5-turbo*", 16_385, "cl100k_base"),
    # Anthropic Claude (3, 3.5, 3.7, 4 and later: 200k)
    Family("*claude*", 200_000),
    # Google Gemini (1.5 Pro: 2M; 1.5 Flash, 2.x and later: 1M; 1.0 Pro: 32k)
    Family("*gemini-1.5-pro*", 2_097_152),
    Family("*gemini-1.0*", 32_760),
    Family("*gemini-pro", 32_760),
    Family("*gemini*", 1_048_576),
    # Meta Llama
    *_open("*llama-4*", "*Llama-4*", window=1_048_576),
    *_open(
        "*llama-3.1*",
        "*llama-3.2*",
        "*llama-3.3*",
        "*Llama-3.1*",
        "*Llama-3.2*",
        "*Llama-3.3*",
        "*llama3.1*",
        "*llama3.2*",
        "*llama3.3*",
        window=131_072,
    ),
    *_open("*llama-3*", "*Llama-3*", "*llama3*", window=8_192),
    *_open("*llama-2*", "*Llama-2*", "*llama2*", window=4_096),
    # Alibaba Qwen (native windows; servers often enable less, or more with YaRN)
    *_open("*qwen-turbo*", "*qwen-long*", window=1_000_000),
    *_open("*qwen-plus*", window=131_072),
    *_open("*qwen*", "*Qwen*", window=32_768),
    # Mistral AI
    *_open("*codestral*", window=256_000),
    *_open(
        "*mistral-large*",
        "*Mistral-Large*",
        "*mistral-nemo*",
        "*Mistral-Nemo*",
        "*ministral*",
        "*Ministral*",
        "*pixtral*",
        window=131_072,
    ),
    *_open("*mixtral-8x22b*", "*Mixtral-8x22B*", window=65_536),
    *_open("*mistral*", "*Mistral*", "*mixtral*", "*Mixtral*", window=32_768),
    # DeepSeek (V3, R1 and their API names deepseek-chat / deepseek-reasoner: 128k)
    *_open("*deepseek*", "*DeepSeek*", window=131_072),
    # Google Gemma
    *_open("*gemma-3*", "*gemma3*", window=131_072),
    *_open("*gemma*", window=8_192),
)
