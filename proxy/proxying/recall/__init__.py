"""The recall rounds on the route (docs/recall.md): ``loop`` reads an answer for recall calls and
asks again, ``stream`` relays a streamed answer while watching for one, ``asker`` sends the next
round, ``usage`` adds up what every round cost. Compaction's side is ``proxy.compaction.recall``."""
