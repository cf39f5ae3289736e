"""The HTML crash report (html).
"""

__all__ = ["html"]
