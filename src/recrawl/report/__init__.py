"""The dashboard: an HTML page from the engine's reads, importable without the service."""
