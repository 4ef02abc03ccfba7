"""Compaction on the request path: what a request to a compacted route becomes.

The route makes one call, ``Compactor.decide(Incoming) -> Decision`` (``decision``); the
decision's ``FollowUp`` (``follow_up``) hears the provider's answer. Inside:

- ``rewriter``: decide -> plan -> render, for one request; ``protocol``: every X-Compaction-*
  header; ``policies`` and ``pinning``: which policy and which checkpoint apply;
  ``conversation``: who and what a request is about; ``planning`` and ``render``: the core's
  planner given a checkpoint, and its plan put on the wire; ``translation``: what a dialect
  must provide.
- ``summaries`` (one at a time, stored, announced), ``ahead`` (after the answer, in the
  ``background``), ``rescue`` (after an overflow), ``stored`` (reading checkpoints),
  ``summarizer`` and ``transcript`` (the LLM call and what it reads).
- ``windows``, ``window_sources``, ``calibration``, ``model_info``: what is known of models.
- ``events``: what compaction tells operator features, through ``proxy.events.Listeners``;
  ``review``: the one hook that may change a plan. Compaction imports no operator feature.
"""
