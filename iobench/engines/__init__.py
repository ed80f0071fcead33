"""Engines: how concurrently samples are fetched. Each engine is one module with one `epoch()`."""
