"""The HTML crash report (html: the summary, the index and the file pages; assets: the style sheet,
script and legend every page inlines).
"""

__all__ = ["assets", "html"]
