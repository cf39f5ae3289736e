"""A newsletter workflow on tinyflow: draft a note about a topic, have it reviewed, publish it."""

from __future__ import annotations

from typing import Any, Callable

from tinyflow import Call, Step

Model = Callable[[Call, str, str], tuple[str, float]]  # (call, task, prompt) -> (answer, cost in USD)


def build_steps(model: Model) -> list[Step]:
    def draft(call: Call, payload: dict[str, Any], memos: dict[str, Any]) -> tuple[Any, float]:
        text, cost = model(call, "draft", f"Write three sentences for subscribers about {payload['topic']}.")
        return {"text": text}, cost

    def review(call: Call, payload: dict[str, Any], memos: dict[str, Any]) -> tuple[Any, float]:
        verdict, cost = model(call, "review", memos["draft"]["text"])
        if verdict.startswith("fail"):
            raise ValueError(f"the review refused the draft: {verdict}")
        return {"publish": {"topic": payload["topic"], "text": memos["draft"]["text"]}}, cost

    return [
        Step("draft", "queued", "drafting", "drafted", draft),
        Step("review", "drafted", "reviewing", "reviewed", review, effects=("publish",)),
    ]
