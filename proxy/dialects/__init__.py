"""One adapter per wire dialect: the body a client sends, translated to the core's neutral
conversation and the core's plan rendered back into the same dialect (docs/architecture.md).
Adding a dialect is adding a module here and a route in ``proxy.app``."""
