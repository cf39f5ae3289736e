"""Fault plans: the TOML schema (plan), how a plan runs as pytest items (runner), the shipped plans
(files) and a plan's known findings (known).
"""

__all__ = ["files", "known", "plan", "runner"]
