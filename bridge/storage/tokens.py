"""The HTTP server's named tokens and the dashboard's sessions (``api_token``,
``dashboard_session``).

Secrets arrive here as their digests only (:func:`bridge.rules.tokens.digest`):
nothing in the store lets anyone sign in. A token that is revoked or past its
expiry is refused where it is looked up, and so are the sessions it began, in
the same statement: revoking a token ends them at the next request. Making a
token and revoking one are units of work of :mod:`bridge.service.tokens`,
which write their audit entry in the same transaction through
:func:`add_token` and :func:`revoke_token`.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Select,
    and_,
    bindparam,
    delete,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from bridge.storage.database import Database
from bridge.storage.models import ApiToken, DashboardSession, UTCDateTime
from bridge.storage.sql import plain_rows

#: How stale ``last_used_at`` may grow before a request writes it again: one write a
#: minute per token, however many requests carry it.
LAST_USED_STEP = timedelta(minutes=1)


def _valid(now: datetime | BindParameter[datetime]) -> ColumnElement[bool]:
    """The tokens that work at ``now``: not revoked, not expired."""
    return and_(
        ApiToken.revoked_at.is_(None),
        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
    )


@functools.cache
def _session_statement() -> Select[*tuple[Any, ...]]:
    """:meth:`TokenStore.session_of`'s statement (bound: ``digest``, ``now``)."""
    now = bindparam("now", type_=UTCDateTime())
    return (
        select(DashboardSession.role.label("session_role"), *ApiToken.__table__.columns)
        .outerjoin(ApiToken, ApiToken.id == DashboardSession.token_id)
        .where(
            DashboardSession.id == bindparam("digest"),
            DashboardSession.expires_at > now,
            or_(DashboardSession.token_id.is_(None), _valid(now)),
        )
    )


class TokenStore:
    """Named tokens and dashboard sessions, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # -- tokens ------------------------------------------------------------------------------

    def every(self) -> list[ApiToken]:
        """Every token, revoked and expired ones too, by name."""
        with self.database.session() as session:
            return list(session.scalars(select(ApiToken).order_by(ApiToken.name)))

    def holder(self, secret_digest: str, now: datetime) -> ApiToken | None:
        """The working token whose secret has ``secret_digest``, marked used at ``now``
        (at most every :data:`LAST_USED_STEP`)."""
        with self.database.session() as session:
            token = session.scalar(
                select(ApiToken).where(ApiToken.secret_digest == secret_digest, _valid(now))
            )
            if token is None:
                return None
            if token.last_used_at is None or token.last_used_at <= now - LAST_USED_STEP:
                token.last_used_at = now
            return token

    # -- dashboard sessions ------------------------------------------------------------------

    def begin_session(
        self,
        session_digest: str,
        token_id: int | None,
        role: str,
        now: datetime,
        expires_at: datetime,
    ) -> None:
        """Record a new session, and forget the sessions that have ended."""
        with self.database.session() as session:
            session.execute(delete(DashboardSession).where(DashboardSession.expires_at <= now))
            session.add(
                DashboardSession(
                    id=session_digest,
                    token_id=token_id,
                    role=role,
                    created_at=now,
                    expires_at=expires_at,
                )
            )

    def session_of(
        self, session_digest: str, now: datetime
    ) -> tuple[str, dict[str, Any] | None] | None:
        """The role of the session ``session_digest`` and its named token's columns (None for
        a settings token's), while both are valid; None once either has ended.

        Asked on every page a browser loads: read as plain values by a statement built
        once, which cost a page a third of what the ORM's objects and statement did.
        """
        with self.database.reading() as session:
            found = plain_rows(
                session, _session_statement(), {"digest": session_digest, "now": now}
            )
        if not found:
            return None
        token = found[0]
        role = token.pop("session_role")
        return role, None if token["id"] is None else token

    def end_session(self, session_digest: str) -> None:
        with self.database.session() as session:
            session.execute(delete(DashboardSession).where(DashboardSession.id == session_digest))


def add_token(
    session: Session,
    name: str,
    role: str,
    secret_digest: str,
    now: datetime,
    created_by: str,
    expires_at: datetime | None,
) -> ApiToken:
    """Store a token (a name taken is refused by the unique index as the transaction
    writes it)."""
    token = ApiToken(
        name=name,
        role=role,
        secret_digest=secret_digest,
        created_at=now,
        created_by=created_by[:255],
        expires_at=expires_at,
    )
    session.add(token)
    session.flush()
    return token


def revoke_token(session: Session, name: str, now: datetime) -> tuple[ApiToken | None, bool]:
    """Revoke the token ``name`` (one revoked already keeps its time) and end the sessions
    it began: the token (None: no such token), and whether this call revoked it."""
    revoked = session.execute(
        update(ApiToken)
        .where(ApiToken.name == name, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    # Its sessions would be refused anyway; they are of no use to keep.
    session.execute(
        delete(DashboardSession).where(
            DashboardSession.token_id.in_(select(ApiToken.id).where(ApiToken.name == name))
        )
    )
    token = session.scalar(select(ApiToken).where(ApiToken.name == name))
    return token, bool(revoked.rowcount)  # type: ignore[attr-defined]
