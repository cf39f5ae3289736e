"""How the crash gate drives the invoice workflow: an adapter, named in pyproject.toml.

The engine is crashgate's own, so the adapter subclasses ``chaos.ReferenceAdapter`` and only says
which workflow to build from the world's services (a recording model, document source and
receiver), what an invoice job carries and what its ids look like (so that findings name
``inv-2024-001:email``), and that this package's lines are crash points too.
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

    def payload(self, job_id: str) -> dict[str, str]:
        """What an invoice job carries: the scanned invoice to read (the reference's default would
        be ``{"source": job_id}``, a document named like the job)."""
        return {"source": f"inbox/{job_id}.pdf"}

    def job_ids(self, n: int) -> list[str]:
        """The invoices the gate submits: numbered as the accounts team numbers them, so that its
        findings and replays name ``inv-2024-001``, not ``doc-1``."""
        return [f"inv-2024-{i:03d}" for i in range(1, n + 1)]

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE]


class UnsafeInvoiceAdapter(InvoiceAdapter):
    """The same pipeline with the first, unsafe ``notify`` (see ``unsafe.py``)."""

    name = "invoices-unsafe"

    def workflow(self, world: Any) -> Any:
        return build_unsafe_workflow(world.model, world.documents, world.sender)


adapter = InvoiceAdapter
unsafe_adapter = UnsafeInvoiceAdapter
