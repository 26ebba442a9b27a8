"""Per-token KL(pi || pi_ref) estimators k1/k2/k3 (Schulman, "Approximating KL divergence", 2020).

With ``log rho = ref_logp - logp`` (``rho = pi_ref / pi``), all are [N, T] -> [N, T] and differentiable
in ``logp``. Names follow the blog; verl names (``kl_loss_type``) are accepted as aliases.

"Unbiased" is about the VALUE, an estimate of KL(pi || ref) from tokens sampled from pi. Used as a loss
term (differentiated on the sampled tokens, as verl's ``use_kl_loss`` does) the expected gradients differ:
k1's is E[grad log pi] = 0 (noise, no pull toward the reference), k2's is the gradient of KL(pi || ref), and
k3's the gradient of KL(ref || pi). k3 and k2 both pull toward the reference.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# verl kl_penalty("low_var_kl") clamps the log-ratio to +-20 and the estimate to +-10
K3_LOG_RATIO_CLAMP = 20.0
K3_CLAMP = 10.0


def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = -log rho = logp - ref_logp (verl ``kl``): unbiased, can be negative, high variance."""
    return logp - ref_logp


def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = 0.5 (log rho)^2 (verl ``mse``): low variance, biased, >= 0."""
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = rho - log rho - 1 (verl ``low_var_kl``, GRPO's estimator): unbiased, >= 0.

    As verl: log rho clamped to [-20, 20] and the result clamped to [-10, 10] (zero gradient there).
    """
    log_rho = (ref_logp - logp).clamp(-K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
    return (torch.exp(log_rho) - log_rho - 1.0).clamp(-K3_CLAMP, K3_CLAMP)


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
VERL_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}


def kl_estimate(name: str, logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token KL estimate by name (``k1``/``k2``/``k3`` or verl ``kl``/``mse``/``low_var_kl``).

    Args:
        name: Estimator name.
        logp: Current-policy log-probs. Shape: [N, T].
        ref_logp: Reference-policy log-probs. Shape: [N, T].

    Returns:
        Per-token estimate, unmasked. Shape: [N, T].

    Raises:
        ValueError: Unknown estimator name.
    """
    key = VERL_ALIASES.get(name, name)
    if key not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {sorted(KL_ESTIMATORS | VERL_ALIASES)}, got {name!r}")
    return KL_ESTIMATORS[key](logp, ref_logp)
