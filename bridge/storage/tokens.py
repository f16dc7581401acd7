"""The HTTP server's named tokens and the dashboard's sessions (``api_token``,
``dashboard_session``).

Secrets arrive here as their digests only (:func:`bridge.rules.tokens.digest`):
nothing in the store lets anyone sign in. A token that is revoked or past its
expiry is refused where it is looked up, and so are the sessions it began, in
the same statement: revoking a token ends them at the next request. Making a
token and revoking one write their audit entry in the same transaction, naming
the token and its role (:func:`bridge.rules.audit.token_fields`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, delete, or_, select, update

from bridge.errors import DuplicateToken
from bridge.rules.audit import NO_SCHEDULE, token_fields
from bridge.storage.audit import Change, log
from bridge.storage.database import Database, UniqueViolation
from bridge.storage.models import ApiToken, DashboardSession

#: How stale ``last_used_at`` may grow before a request writes it again: one write a
#: minute per token, however many requests carry it.
LAST_USED_STEP = timedelta(minutes=1)


def _valid(now: datetime) -> ColumnElement[bool]:
    """The tokens that work at ``now``: not revoked, not expired."""
    return and_(
        ApiToken.revoked_at.is_(None),
        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
    )


class TokenStore:
    """Named tokens and dashboard sessions, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # -- tokens ------------------------------------------------------------------------------

    def create(
        self,
        name: str,
        role: str,
        secret_digest: str,
        now: datetime,
        change: Change,
        expires_at: datetime | None,
    ) -> ApiToken:
        """Store a token made by ``change``'s actor, with its audit entry."""
        token = ApiToken(
            name=name,
            role=role,
            secret_digest=secret_digest,
            created_at=now,
            created_by=change.actor[:255],
            expires_at=expires_at,
        )
        try:
            with self.database.session() as session:
                session.add(token)
                log(
                    session,
                    change,
                    now,
                    None,
                    NO_SCHEDULE,
                    after=token_fields(name, role, expires_at),
                )
        except UniqueViolation:
            raise DuplicateToken(token.name) from None
        return token

    def every(self) -> list[ApiToken]:
        """Every token, revoked and expired ones too, by name."""
        with self.database.session() as session:
            return list(session.scalars(select(ApiToken).order_by(ApiToken.name)))

    def revoke(self, name: str, now: datetime, change: Change) -> ApiToken | None:
        """Revoke the token ``name``, with its audit entry (one revoked already keeps its
        time, and logs nothing); None: no such token."""
        with self.database.session() as session:
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
            if token is not None and revoked.rowcount:  # type: ignore[attr-defined]
                fields = token_fields(token.name, token.role, token.expires_at)
                log(session, change, now, None, NO_SCHEDULE, after=fields)
            return token

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
    ) -> tuple[DashboardSession, ApiToken | None] | None:
        """The session ``session_digest`` and its named token (None for a settings token's),
        while both are valid; None once either has ended."""
        statement = (
            select(DashboardSession, ApiToken)
            .outerjoin(ApiToken, ApiToken.id == DashboardSession.token_id)
            .where(
                DashboardSession.id == session_digest,
                DashboardSession.expires_at > now,
                or_(DashboardSession.token_id.is_(None), _valid(now)),
            )
        )
        with self.database.session() as session:
            found = session.execute(statement).first()
            return None if found is None else (found[0], found[1])

    def end_session(self, session_digest: str) -> None:
        with self.database.session() as session:
            session.execute(delete(DashboardSession).where(DashboardSession.id == session_digest))
