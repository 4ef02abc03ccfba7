"""Summaries: ``making`` (one per conversation at a time, stored, told), ``summarizer`` and
``transcript`` (the LLM call and what it reads), ``prefix_summary`` (asked on the cached prefix),
``ahead`` and ``background`` (made before they are due), ``stored`` and ``pinning`` (the
checkpoints a request reads or pins) and ``focus`` (a one-off instruction for one summary)."""
