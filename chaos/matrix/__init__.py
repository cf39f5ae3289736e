"""The crash matrix: the scenario families, the run that kills, pauses and interleaves every
point of each (runner), its door, where what it is given is checked and the target resolved
(door), which items it runs and which share an outcome (selection), the items run here or in
lean processes (work), the lean process that runs its chunks (zygote), what it reports (report)
and its benchmark rows (bench).
"""

__all__ = ["bench", "door", "families", "report", "runner", "selection", "work", "zygote"]
