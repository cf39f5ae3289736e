"""Fault plans: the TOML schema (plan) and how a plan runs as pytest items (runner).
"""

__all__ = ["files", "plan", "runner"]
