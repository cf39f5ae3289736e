"""Fault plans: the TOML schema's vocabulary (schema), a parsed plan (model), reading one (plan),
checking one against its target (target_check), how a plan's points run as pytest items
(runner), its scripted scenarios played (scenarios), the shipped plans (files) and a plan's
known findings (known).
"""

__all__ = ["files", "known", "model", "plan", "runner", "scenarios", "schema", "target_check"]
