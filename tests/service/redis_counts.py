"""Redis's own count of the commands a request runs, for the tests that bound a round's Redis calls."""

from __future__ import annotations

import redis

__all__ = ["NOT_THE_ROUNDS", "commands", "used_between"]

# Commands no round runs, which may still fall in a request's window: INFO is the count's own; PING is
# redis-py's health check of a connection idle for 15 s, which a loaded machine reaches between two requests
# whatever they do; HELLO and CLIENT SETNAME are a new pooled connection's handshake (a background task may
# hold the open one just then); CONFIG GET is the eviction guard's periodic check of Redis's maxmemory-policy
# (kons_service.core.eviction); SMEMBERS is the shadows' loop listing the challengers to catch up
# (kons_service.core.shadows), which a feedback wakes and which polls every half second.
NOT_THE_ROUNDS = frozenset({"info", "ping", "hello", "client|setname", "config|get", "smembers"})


def commands(server: redis.Redis) -> dict[str, int]:
    """Redis's count of each command run so far (commands inside scripts included)."""
    stats = server.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def used_between(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The commands of the rounds run between two counts (:data:`NOT_THE_ROUNDS` left out)."""
    return {name: n - before.get(name, 0) for name, n in after.items()
            if n != before.get(name, 0) and name not in NOT_THE_ROUNDS}
