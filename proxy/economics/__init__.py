"""What compaction costs and saves, in dollars: pure, no I/O. Compaction uses it
(``proxy.compaction.money.spending``: each answer priced into the conversation's ledger).

- ``prices``: dollars per million tokens by model (a dated built-in table, the user's
  ``pricing:`` overrides, a default for the rest);
- ``usage``: what the provider billed, read from the end of a response body;
- ``ledger``: a conversation's totals, spent and saved against sending direct;
- ``decision``: whether compacting now pays over the turns to come.

It imports only itself, ``proxy.config``, ``proxy.core``, ``proxy.errors`` and ``proxy.types``,
so the request path, the admin API and the metrics can all use it (tests/economics checks
it). Its one side effect is a warning logged for a model it cannot price.
"""
