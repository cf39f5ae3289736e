"""Fault plans: the TOML schema's vocabulary (schema), a parsed plan (model), reading one (plan),
checking one against its target (target_check), how a plan runs as pytest items (runner), the
shipped plans (files) and a plan's known findings (known).
"""

__all__ = ["files", "known", "model", "plan", "runner", "schema", "target_check"]
