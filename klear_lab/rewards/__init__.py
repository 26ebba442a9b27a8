"""Rewards / verifiers (``REWARD`` registry): ``math_verify`` and ``code``.

Every module here is imported when the registry is first read; helper modules (``base``,
``pool``, ``math_check``, ``sandbox``, ``seccomp``) register nothing. Keep this package free of
torch imports: scoring workers import it.
"""
