"""When a coding agent compacts on its own (docs/agent-compaction.md): ``own_compaction``
answers its summary request from the conversation's summary, ``items`` seals what
``/v1/responses/compact`` hands out."""
