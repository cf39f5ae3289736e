"""How the crash gate drives the orders workflow (named in the project's pytest settings)."""

from __future__ import annotations

import os
from typing import Any

from chaos import ReferenceAdapter

from . import unsafe
from .workflow import build_workflow

HERE = os.path.dirname(os.path.abspath(__file__))


class OrdersAdapter(ReferenceAdapter):
    name = "orders"

    def workflow(self, world: Any) -> Any:
        return build_workflow(world.model, world.documents)

    def payload(self, job_id: str) -> dict[str, str]:
        """What an order job carries: the order to fetch (the reference's default is a document)."""
        return {"order": job_id}

    def job_ids(self, n: int) -> list[str]:
        """The orders the gate submits: its findings and replays name ``order-1001``, not ``doc-1``."""
        return [f"order-{1000 + i}" for i in range(1, n + 1)]

    def trace_paths(self) -> list[str]:
        return super().trace_paths() + [HERE]


class CachedOrdersAdapter(OrdersAdapter):
    def workflow(self, world: Any) -> Any:
        return unsafe.build_cached(world.model, world.documents)


class OwnClientOrdersAdapter(OrdersAdapter):
    def workflow(self, world: Any) -> Any:
        return unsafe.build_own_client(world.model, world.documents)


adapter = OrdersAdapter
cached = CachedOrdersAdapter
own_client = OwnClientOrdersAdapter
