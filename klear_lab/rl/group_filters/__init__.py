"""Online group filters (registry ``GROUP_FILTER``), one per module."""
