"""Features remembered under a client's prediction ids (``remember.lua``, ``recall.lua``), so that a
feedback may name the id instead of sending the features again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kons_service.store.connection import Connection
from kons_service.store.errors import translated
from kons_service.store.records import LearnerRef

__all__ = ["RememberedIds"]


class RememberedIds:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @translated
    async def remember(self, ref: LearnerRef, items: Sequence[tuple[str, bytes]], ttl_ms: int,
                       max_ids: int) -> bool:
        """Keep each payload under its id for ``ttl_ms`` (at most ``max_ids``, the oldest dropped first);
        False if the learner is gone."""
        args: list[Any] = [ttl_ms, max_ids]
        for id_, payload in items:
            args += [id_, payload]
        return bool(await self.connection.run("remember", ref, ("meta", "ids", "ids_exp"), args))

    @translated
    async def recall(self, ref: LearnerRef, ids: list[str]) -> list[bytes | None]:
        reply = await self.connection.run("recall", ref, ("ids", "ids_exp"), list(ids))
        return [bytes(v) if v else None for v in reply]
