"""Token-loss aggregation modes (registry ``AGGREGATION``), one per module."""
