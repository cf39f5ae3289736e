"""An invoice pipeline on crashgate's engine: read an invoice, extract its fields, notify accounts."""

from .workflow import build_workflow

__all__ = ["build_workflow"]
