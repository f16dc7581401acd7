"""Whether a process of one release may run against a store: the schema's revision, and
the oldest release the store accepts.

Every migration moves the database's Alembic revision; each release knows the
revisions it ships and expects the newest of them (its head). A store behind
that head lacks what the release reads and writes: the release refuses, and
``migrate`` is the cure. A store ahead of it was migrated by a later release;
that release's migrations also record the oldest release whose processes may
still run against the result (``schema_release.oldest_release``), so that an
additive change leaves older processes running and a breaking one stops them
with a word instead of an error in the middle of a fire. A process older than
that record refuses, and upgrading the package is the cure.

Releases before 0.2.0 neither record nor check this.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

#: What a user runs to bring the schema up to the release.
MIGRATE = "run `celery -A APP bridge migrate`"
#: What a user runs when the schema belongs to a later release.
UPGRADE = "upgrade the package: pip install -U celery-periodic-bridge"

_NUMBERS = re.compile(r"\d+(?:\.\d+)*")


def release_key(release: str) -> tuple[int, ...] | None:
    """``'0.2.0'`` as ``(0, 2, 0)`` for comparison, trailing zeros dropped so that ``0.2``
    equals ``0.2.0``; None when ``release`` does not start with a number (a checkout that
    was never installed says ``unknown``)."""
    found = _NUMBERS.match(release.strip())
    if found is None:
        return None
    parts = [int(part) for part in found.group().split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


class Fit(Enum):
    """How a store's schema stands to the release that reads it."""

    #: At the release's head, or ahead of it by migrations the release may run beside.
    MATCHES = "matches"
    #: No bridge tables at all: ``migrate`` has never run.
    EMPTY = "empty"
    #: At an older revision of the release's own: ``migrate`` brings it up.
    BEHIND = "behind"
    #: Migrated by a later release that this one may not run beside.
    AHEAD = "ahead"


@dataclass(frozen=True)
class Schema:
    """What the store says of its schema, and what the release running knows of it."""

    #: The database's Alembic revision; None when it has never been migrated.
    revision: str | None
    #: The revision this release expects: the newest it ships.
    head: str
    #: Every revision this release ships, the head included.
    known: Collection[str]
    #: The oldest release the store accepts; None where no migration recorded one.
    oldest_release: str | None

    def fit(self, release: str) -> Fit:
        """How the schema stands to ``release``, the one running."""
        if self.revision is None:
            return Fit.EMPTY
        if self.revision != self.head and self.revision in self.known:
            return Fit.BEHIND
        if self.revision != self.head and self.oldest_release is None:
            return Fit.AHEAD  # a later schema that says nothing of who may run beside it
        if self.oldest_release is not None and _older(release, self.oldest_release):
            return Fit.AHEAD
        return Fit.MATCHES

    def refusal(self, release: str, where: str) -> str | None:
        """One line saying why a process of ``release`` may not run against the store at
        ``where`` and what to run; None when it may."""
        fit = self.fit(release)
        this = f"this release (celery-periodic-bridge {release}) expects revision {self.head}"
        if fit is Fit.EMPTY:
            return f"schema: database {where} has no bridge tables; {this}: {MIGRATE}"
        if fit is Fit.BEHIND:
            return f"schema: database {where} is at revision {self.revision}; {this}: {MIGRATE}"
        if fit is Fit.AHEAD:
            needs = (
                f", which needs celery-periodic-bridge {self.oldest_release} or later"
                if self.oldest_release is not None
                else ", written by a later release"
            )
            return (
                f"schema: database {where} is at revision {self.revision}{needs}; {this}: {UPGRADE}"
            )
        return None


def _older(release: str, oldest: str) -> bool:
    """Whether ``release`` comes before ``oldest``; a release that cannot be read is not
    judged older (it is refused only by the revision)."""
    mine, theirs = release_key(release), release_key(oldest)
    return mine is not None and theirs is not None and mine < theirs
