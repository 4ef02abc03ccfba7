"""What compaction knows of models: their context windows (``windows``, from the sources in
``window_sources``), token counts calibrated against the provider's (``calibration``), and the two
joined for one model (``model_info``). Imports only the compaction root's ``events``."""
