"""RL math: clip variants, loss aggregation, advantages, group filters, KL, overlong shaping."""
