"""The crash matrix: the scenario families, the runner that kills, pauses and interleaves every
point of each (runner), the lean process that runs its chunks (zygote) and its benchmark rows (bench).
"""

__all__ = ["bench", "families", "runner", "zygote"]
