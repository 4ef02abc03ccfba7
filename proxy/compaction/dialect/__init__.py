"""What compaction needs of a wire dialect (the contract ``proxy/dialects`` implements):
``translation`` (the Translator: neutral messages in and out), ``native`` (the provider's own
context management: what is asked, what is reported) and ``recall`` (the recall tool's shape).
The floor under the rest of compaction: imports nothing of compaction."""
