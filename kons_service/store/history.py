"""A learner's recorded history (``history.lua``): a capped series of JSON points, thinned by a stride."""

from __future__ import annotations

from kons_service.store import keys
from kons_service.store.connection import Connection, text
from kons_service.store.errors import translated
from kons_service.store.records import LearnerRef

__all__ = ["HistorySeries"]


class HistorySeries:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @translated
    async def record(self, ref: LearnerRef, incarnation: str, version: int, point: str, cap: int) -> int:
        """Offer a point of the learner's history at ``version`` (see ``history.lua``); returns the
        series' stride (0 if the learner is gone or was replaced)."""
        reply = await self.connection.run("history", ref, ("meta", "hist"),
                                          [incarnation, version, point, cap])
        return int(reply[1])

    @translated
    async def read(self, ref: LearnerRef) -> tuple[int, list[str], str, str] | None:
        """The stride and points (JSON) of the learner's history, its change events (a JSON list of
        ``[version, changes]``) and its rollbacks (``[version, target, time ms, token]``, see
        ``rollback.lua``); None if there is no such learner."""
        pipe = self.connection.client.pipeline(transaction=False)
        pipe.hmget(keys.learner_key(ref, "meta"), ["config", "hist_stride", "hist_changes", "rollbacks"])
        pipe.lrange(keys.learner_key(ref, "hist"), 0, -1)
        (config, stride, changes, rollbacks), points = await pipe.execute()
        if config is None:
            return None
        return (int(stride or 1), [text(p) for p in points], text(changes) if changes else "[]",
                text(rollbacks) if rollbacks else "[]")
