"""The cost benchmark: replays long transcripts straight to a provider that applies the
providers' prompt-caching rules, and through the proxy, and prices what each run was billed.

- ``prompts``: what a provider received, as the token pieces its cache compares;
- ``caching``: the two caching rules (OpenAI's automatic prefix blocks, Anthropic's breakpoints);
- ``provider``: the mock provider serving both APIs, billing every request;
- ``prices``: the price models, dated;
- ``transcripts``: the three seeded transcripts and their pace;
- ``replay``: one transcript played with the official SDK under one caching rule;
- ``setups``: direct, and the proxy under each policy (a list, for more later);
- ``bench_cost``: the command (``python -m tests.bench.cost.bench_cost``). docs/cost.md.
"""
