"""Real worker processes under a monkey: the fleet, one trial and its verdict, the receiver and
the services the workers call, the demo and the soak, and their settings checked.
"""

__all__ = ["demo", "fleet", "receiver", "services", "settings", "soak", "trial", "verdict"]
