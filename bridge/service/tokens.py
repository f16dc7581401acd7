"""Named tokens and dashboard sessions: made, read, revoked and ended.

A token's or a session's secret is made here and handed back once; the store
keeps its digest only (:func:`bridge.rules.tokens.digest`). A token made or
revoked writes its audit entry in the same transaction, naming the token, its
role and its expiry (:func:`bridge.rules.audit.token_fields`), never its secret
nor the secret's digest; the entry belongs to no schedule.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from bridge.clock import utcnow
from bridge.errors import DuplicateToken, ValidationError
from bridge.rules.audit import NO_SCHEDULE, token_fields
from bridge.rules.tokens import (
    TOKEN_PREFIX,
    Role,
    check_role,
    check_token_name,
    digest,
    expiry,
    may_be_named_token,
    session_end,
)
from bridge.rules.values import lookup_text
from bridge.service.views import Token
from bridge.storage import tokens
from bridge.storage.audit import Change, log
from bridge.storage.database import Database, UniqueViolation
from bridge.storage.tokens import TokenStore


class Tokens:
    """Named tokens and dashboard sessions, against one database."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.store = TokenStore(database)

    def create(
        self, name: str, role: str, expires: str | None, change: Change
    ) -> tuple[Token, str]:
        """Make a named token made by ``change``'s actor, with its audit entry; the token and
        its secret. :class:`DuplicateToken` if its name is taken."""
        now = utcnow()
        check_token_name(name)
        checked_role = check_role(role).value
        until = expiry(expires, now)
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        try:
            with self.database.session() as session:
                token = tokens.add_token(
                    session, name, checked_role, digest(secret), now, change.actor, until
                )
                after = token_fields(name, checked_role, until)
                log(session, change, now, None, NO_SCHEDULE, after=after)
        except UniqueViolation:
            raise DuplicateToken(name) from None
        return Token.of(token), secret

    def every(self) -> list[Token]:
        """Every named token, revoked and expired ones too, by name."""
        return [Token.of(row) for row in self.store.every()]

    def revoke(self, name: str, change: Change) -> Token:
        """Revoke the token ``name``, with its audit entry (one revoked already keeps its
        time, and logs nothing); refused naming ``name`` if there is no such token."""
        checked = lookup_text("name", name)
        now = utcnow()
        with self.database.session() as session:
            token, revoked = tokens.revoke_token(session, checked, now)
            if token is not None and revoked:
                fields = token_fields(token.name, token.role, token.expires_at)
                log(session, change, now, None, NO_SCHEDULE, after=fields)
        if token is None:
            raise ValidationError("name", name, "the name of a token (see bridge token ls)")
        return Token.of(token)

    def holder(self, secret: str) -> Token | None:
        """The named token whose secret is ``secret``, while it works; None otherwise."""
        if not may_be_named_token(secret):
            return None
        row = self.store.holder(digest(secret), utcnow())
        return None if row is None else Token.of(row)

    def begin_session(self, role: Role, token: Token | None, lifetime: timedelta) -> str:
        """Record a dashboard session of ``role``, begun with the named ``token`` (None: a
        settings token), for ``lifetime`` or until the token expires; its secret."""
        now = utcnow()
        secret = secrets.token_urlsafe(32)
        end = session_end(now, lifetime, None if token is None else token.expires_at)
        token_id = None if token is None else token.id
        self.store.begin_session(digest(secret), token_id, role.value, now, end)
        return secret

    def session(self, secret: str) -> tuple[Role, Token | None] | None:
        """The role of the dashboard session ``secret`` and its named token, while both last;
        None once either ended."""
        found = self.store.session_of(digest(secret), utcnow())
        if found is None:
            return None
        role, token = found
        return Role(role), None if token is None else Token.of(token)

    def end_session(self, secret: str) -> None:
        """End a dashboard session: its cookie no longer signs anyone in."""
        self.store.end_session(digest(secret))
