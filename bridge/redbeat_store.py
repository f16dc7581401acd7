"""RedBeat's schedule in Redis, read as it is, and disabled.

``bridge import --from redbeat`` reads the store RedBeat keeps: the sorted
set ``<prefix>:schedule`` of its entries' keys (scored by their next run), a
hash per entry whose ``definition`` and ``meta`` fields hold RedBeat's JSON,
and the set ``<prefix>:statics`` of the names its ``beat_schedule`` owns. The
only write is :func:`disable_entries`: ``enabled: false`` in the definition
of each entry taken over, which RedBeat reads before every fire.

Entries come back as stored, undecoded: turning them into schedules is
:mod:`bridge.manage.importers.redbeat`'s. This module holds the store's I/O
apart from the management side, which imports no broker client. redis-py
comes with the ``redis`` extra and is imported when the store is read, so
that the package imports without it, and a missing extra is refused in a line
that names it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from bridge.errors import BridgeError

#: RedBeat's own default key prefix (its ``redbeat_key_prefix``).
REDBEAT_PREFIX = "redbeat:"


class StoredEntry(NamedTuple):
    """One entry of RedBeat's schedule, as its hash holds it."""

    key: str
    #: The ``definition`` field: the entry's task, schedule, arguments and options, as JSON.
    definition: bytes | None
    #: The ``meta`` field: its last run and run count, as JSON.
    meta: bytes | None
    #: Its score in ``<prefix>:schedule``: when it is next due, in seconds since the epoch.
    score: float | None


def _redis() -> Any:
    try:
        import redis
    except ImportError:
        raise BridgeError(
            "--from redbeat needs redis-py: install celery-periodic-bridge[redis]"
        ) from None
    return redis


def read_entries(url: str, prefix: str) -> tuple[list[StoredEntry], frozenset[str]]:
    """Every entry of RedBeat's schedule under ``prefix``, by key, and the code-owned names."""
    redis = _redis()
    client: Any = redis.Redis.from_url(url)
    try:
        keys = [k.decode() for k in client.zrange(f"{prefix}:schedule", 0, -1)]
        scores = {
            k.decode(): s for k, s in client.zrange(f"{prefix}:schedule", 0, -1, withscores=True)
        }
        statics = frozenset(s.decode() for s in client.smembers(f"{prefix}:statics"))
        entries = []
        for key in sorted(keys):
            definition, meta = client.hmget(key, ["definition", "meta"])
            entries.append(StoredEntry(key, definition, meta, scores.get(key)))
    except redis.RedisError as exc:
        raise BridgeError(f"source: {url}: {exc}") from None
    finally:
        client.close()
    return entries, statics


def disable_entries(url: str, keys: Sequence[str]) -> None:
    """``enabled: false`` in each entry's definition: RedBeat reads it before every fire."""
    client: Any = _redis().Redis.from_url(url)
    try:
        for key in keys:
            text = client.hget(key, "definition")
            if not text:
                continue
            definition = json.loads(text)
            definition["enabled"] = False
            client.hset(key, "definition", json.dumps(definition))
    finally:
        client.close()
