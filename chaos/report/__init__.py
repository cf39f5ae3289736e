"""The crash report: summary (the records counted by fault kind), terminal (the summary pytest
prints), html (the index and the file pages), report_path (the report's path, checked before the
run) and assets (the style sheet, script and legend every page inlines).
"""

__all__ = ["assets", "html", "report_path", "summary", "terminal"]
