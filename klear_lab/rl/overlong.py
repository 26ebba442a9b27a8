"""DAPO overlong reward shaping (a pure tensor function; `rl.overlong: mask` is `modules.rl_parts.shape_rewards`)."""

from __future__ import annotations

from torch import Tensor


def overlong_penalty(lengths: Tensor, max_len: int, buffer_len: int, factor: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment (arXiv 2503.14476, Sec. 3.4), added to the reward.

    ``0`` if ``|y| <= max_len - buffer_len``; ``-factor (|y| - (max_len - buffer_len)) / buffer_len``
    inside the buffer; ``-factor`` from ``max_len`` on. Matches verl DAPO's
    ``min(-exceed_len / buffer_len * penalty_factor, 0)`` for ``|y| <= max_len``.

    Args:
        lengths: Response lengths in tokens. Shape: [N].
        max_len: Generation budget L_max.
        buffer_len: Soft buffer L_cache, in (0, max_len].
        factor: Penalty scale (verl ``overlong_buffer.penalty_factor``, DAPO 1.0).

    Returns:
        Penalty <= 0, float. Shape: [N].

    Raises:
        ValueError: Bad ``max_len``, ``buffer_len`` or ``factor``.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"buffer_len must be in (0, max_len={max_len}], got {buffer_len}")
    if factor < 0:
        raise ValueError(f"factor must be >= 0, got {factor}")
    exceed = (lengths.float() - (max_len - buffer_len)) / buffer_len  # [N]
    return -factor * exceed.clamp(0.0, 1.0)
