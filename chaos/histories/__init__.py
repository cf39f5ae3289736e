"""Random histories: Hypothesis's state machine (state_machine), the worker lives it forks,
kills and freezes (lives) and the events it draws (events). ``chaos.machine`` is its public face.
"""

__all__ = ["events", "lives", "state_machine"]
