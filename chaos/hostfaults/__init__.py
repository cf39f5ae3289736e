"""Faults of the host under a crash: a full disk, I/O errors, a held lock, a stepped clock
(faults, with their checks and the real worker process they run in) and power cuts (power, power_faults,
power_checks, power_runs).
"""

__all__ = ["checks", "faults", "power", "power_checks", "power_faults", "power_runs", "worker"]
