"""Named tokens made and revoked, each with its audit entry in the same transaction.

The entry names the token, its role and its expiry (:func:`bridge.rules.audit.token_fields`),
never its secret nor the secret's digest; it belongs to no schedule.
"""

from __future__ import annotations

from datetime import datetime

from bridge.errors import DuplicateToken
from bridge.rules.audit import NO_SCHEDULE, token_fields
from bridge.storage import tokens
from bridge.storage.audit import Change, log
from bridge.storage.database import Database, UniqueViolation
from bridge.storage.models import ApiToken


class Tokens:
    """Named tokens changed by operators, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def create(
        self,
        name: str,
        role: str,
        secret_digest: str,
        now: datetime,
        change: Change,
        expires_at: datetime | None,
    ) -> ApiToken:
        """Store a token made by ``change``'s actor, with its audit entry;
        :class:`DuplicateToken` if its name is taken."""
        try:
            with self.database.session() as session:
                token = tokens.add_token(
                    session, name, role, secret_digest, now, change.actor, expires_at
                )
                after = token_fields(name, role, expires_at)
                log(session, change, now, None, NO_SCHEDULE, after=after)
        except UniqueViolation:
            raise DuplicateToken(name) from None
        return token

    def revoke(self, name: str, now: datetime, change: Change) -> ApiToken | None:
        """Revoke the token ``name``, with its audit entry (one revoked already keeps its
        time, and logs nothing); None: no such token."""
        with self.database.session() as session:
            token, revoked = tokens.revoke_token(session, name, now)
            if token is not None and revoked:
                fields = token_fields(token.name, token.role, token.expires_at)
                log(session, change, now, None, NO_SCHEDULE, after=fields)
            return token
