"""The pure compaction core: a conversation in, the exact prompt to send out.

Messages, interactions and tool rounds, conditions, token counts, triggers, keep, the planner,
the summary message, checkpoints and the plan's view. It imports no web, HTTP, store or
config-loading module (``tests/core/test_core_imports.py`` keeps it so): the dialect adapters
(``proxy.dialects``) translate wire bodies to and from it, the request path
(``proxy.compaction.compactor``) gives it state. See docs/architecture.md.
"""
