"""Reading a stream of bytes within a limit: a state upload (:meth:`.LearnerService.import_state`) and
every JSON body of the edge (:mod:`kons_service.http.body`) are read by it."""

from __future__ import annotations

from collections.abc import AsyncIterator

from kons_service.core.errors import PayloadTooLargeError

__all__ = ["read_limited"]


async def read_limited(stream: AsyncIterator[bytes], declared: str | None, limit: int) -> bytes:
    """Read a body of at most ``limit`` bytes (checking its declared length first), else
    :class:`PayloadTooLargeError`."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"The body is {declared} bytes; at most {limit} are accepted.")
    chunks, size = [], 0
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"The body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)
