"""Compaction on the request path: what a request to a compacted route becomes.

The route makes one call per request, ``Incoming -> Decision`` (``decision``): the one
``Compactor.decide_for`` handed it when it was built (``Compactor.decide``, or straight the
rewriter's on a route where no agent's own compaction is answered); the decision's
``FollowUp`` (``follow_up``) hears the provider's answer. The root holds the shared leaves and
the pipeline; each axis is a sub-package (tests/compaction/test_axes.py keeps every
import going down its floors):

- the root: ``rewriter`` (decide -> plan -> render, for one request), ``protocol`` (every
  X-Compaction-* header), ``policies`` (which policy applies), ``conversation`` (who and what a
  request is about), ``planning`` and ``render`` (the core's planner given a checkpoint, its plan
  on the wire), ``rescue`` (after an overflow), ``review`` (the one hook that may change a plan),
  ``events`` (what compaction tells operator features, through ``proxy.events.Listeners``),
  ``offload`` and ``settings``. Compaction imports no operator feature.
- ``dialect``: what a wire dialect must provide; ``models``: what is known of models;
  ``money``: what compaction costs and when it pays; ``summaries``: made, stored, pinned, ahead;
  ``recall``: what a plan removed, fetched back; ``agents``: an agent's own compaction;
  ``native``: the provider's own compaction.
"""
