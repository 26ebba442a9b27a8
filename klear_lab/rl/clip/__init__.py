"""Policy-gradient surrogates (registry ``CLIP``), one variant per module; shared pieces in ``base``."""
