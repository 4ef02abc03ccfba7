"""What compaction costs and when it pays: ``pending`` (store writes nobody waits for),
``spending`` (each answer and summary priced onto the ledger), ``pace`` (how fast a conversation
grows, the summaries made ahead for it) and ``paying`` (the price trigger). Below recall and
summaries, which price their own calls with ``spending``."""
