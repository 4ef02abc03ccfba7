"""``strategy: native`` on the request path: ``calls`` sends one request with the provider's
own context management and reads what it did. The shapes it speaks are the dialect's
(``proxy.compaction.dialect.native``)."""
