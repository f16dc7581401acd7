"""The mark is a lease: held while renewed, taken over once it expires."""

from __future__ import annotations

from datetime import timedelta

from bridge import Bridge
from bridge.clock import utcnow
from bridge.storage.beat import BeatStore

LEASE = timedelta(seconds=30)


def test_a_renewed_lease_holds_and_an_expired_one_is_taken_over(api: Bridge) -> None:
    for name in ("a", "b"):
        api.add(name, task="workers.app.quick", timer="every 1h")
    store = BeatStore(api.database)
    due = utcnow() + timedelta(hours=2)  # both rows are due by then
    mine = store.claim_due("beat-1", due, LEASE, 10)
    assert sorted(row.name for row in mine) == ["a", "b"]

    # Renewed before it expired: another instance claims nothing.
    renewed_at = due + timedelta(seconds=20)
    assert store.renew("beat-1", [row.id for row in mine], renewed_at) == {r.id for r in mine}
    assert store.claim_due("beat-2", due + timedelta(seconds=40), LEASE, 10) == []

    # Not renewed again: once the lease has run out, another instance takes the rows over,
    # and the first one can no longer renew them or write through its old mark.
    taken = store.claim_due("beat-2", renewed_at + LEASE + timedelta(seconds=1), LEASE, 10)
    assert sorted(row.name for row in taken) == ["a", "b"]
    assert store.renew("beat-1", [row.id for row in mine], renewed_at + LEASE) == set()
    assert store.reread([mine[0].id], "beat-1", renewed_at) == {}
