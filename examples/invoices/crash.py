"""How the crash gate drives the invoice workflow: an adapter, named in pyproject.toml.

The engine is crashgate's own, so the adapter subclasses ``chaos.ReferenceAdapter`` and only says
which workflow to build from the world's services (a recording model, document source and
receiver) and that this package's lines are crash points too.
"""

from __future__ import annotations

import os
from typing import Any

from chaos import ReferenceAdapter

from .unsafe import build_unsafe_workflow
from .workflow import build_workflow

HERE = os.path.dirname(os.path.abspath(__file__))


class InvoiceAdapter(ReferenceAdapter):
    name = "invoices"

    def workflow(self, world: Any) -> Any:
        return build_workflow(world.model, world.documents, world.sender)

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE]


class UnsafeInvoiceAdapter(InvoiceAdapter):
    """The same pipeline with the first, unsafe ``notify`` (see ``unsafe.py``)."""

    name = "invoices-unsafe"

    def workflow(self, world: Any) -> Any:
        return build_unsafe_workflow(world.model, world.documents, world.sender)


adapter = InvoiceAdapter
unsafe_adapter = UnsafeInvoiceAdapter
