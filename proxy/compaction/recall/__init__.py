"""The recall tool, compaction's side (docs/recall.md): ``tool`` (which requests get it, the
originals kept, the answer to one call), ``notes`` (what a plan removed, named for fetching back),
``answer`` (an original handed back as quoted data) and ``events``. The route's side, the rounds
with the provider, is ``proxy.proxying.recall``."""
