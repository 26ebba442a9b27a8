"""Group advantage estimators (registry ``ADVANTAGE``), one per module; shared checks in ``base``."""
