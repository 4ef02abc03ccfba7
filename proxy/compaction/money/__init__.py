"""What compaction costs and when it pays: ``books`` (a conversation's entry: its ledger, timeline
and pace, and what an answer or a summary does to it, pure), ``spending`` (the entry's one writer:
each answer and summary priced onto it), ``pending`` (store writes nobody waits for), ``pace``
(how fast a conversation grows, the summaries made ahead for it) and ``paying`` (the price
trigger). Below recall and summaries, which price their own calls with ``spending``."""
