"""Random histories: Hypothesis's state machine (state_machine), the end of a history drained and
checked at rest (at_rest), what a history raises when an invariant fails (violations), a job run
alone without any fault (alone), the databases histories run on (databases), the worker lives it
forks, kills and freezes (lives) and the events it draws (events). ``chaos.machine`` is its public
face.
"""

__all__ = ["alone", "at_rest", "databases", "events", "lives", "state_machine", "violations"]
