"""``compaction-proxy eval``: measure what a policy's compaction loses, on your own model.

Transcripts (built-in synthetic ones with known answers, or the user's own) are replayed through
the proxy's real app, turn by turn; then probe questions are asked three ways: with the full
history, with the history as the policy compacted it, and with a truncation baseline at the same
token budget. docs/evaluation.md explains the figures.

    synthetic, transcripts -> probes -> replay (the proxy) -> runner (asks the model) -> scoring
    -> report
"""
