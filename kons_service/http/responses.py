"""The JSON answer of every API route and error: always UTF-8 text, even for a string that is not text.

Bodies holding a lone UTF-16 surrogate are refused (:mod:`kons_service.http.parsers`), but a learner may
hold one from before they were (a class, a record's name or category): its answers, which could not be
encoded, show each lone surrogate as the replacement characters (U+FFFD) of its three bytes, as a lenient
UTF-8 decoder reads them and as pydantic-core already writes an object key (a classifier's probabilities),
so that a class reads the same in every field; the learner, its tenant's list and its dashboard answer.
The learner is unchanged.
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from fastapi.responses import JSONResponse

__all__ = ["TextJSONResponse"]

class TextJSONResponse(JSONResponse):
    """A JSON response rendered by pydantic-core (as FastAPI renders a response model), lone surrogates
    replaced. API routes answer with it (:class:`~kons_service.http.body.KonsRoute`): FastAPI's own fast
    path, which renders a response model straight to JSON, would fail on one, or write it as bytes that are
    not UTF-8 when it is a key."""

    def render(self, content: Any) -> bytes:
        try:
            return pydantic_core.to_json(content)
        except pydantic_core.PydanticSerializationError:  # a lone surrogate in a string
            return pydantic_core.to_json(_whole_characters(content))


def _whole_characters(value: Any) -> Any:
    """``value`` with every lone surrogate of its strings (keys included) replaced by U+FFFD (three)."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_whole_characters(k): _whole_characters(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_whole_characters(v) for v in value]
    return value
