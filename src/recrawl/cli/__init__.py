"""The ``recrawl`` command line: a thin edge over the engine."""
