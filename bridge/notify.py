"""Alerts sent to notification URLs (``bridge_alert_urls``), through Apprise.

Apprise (the ``alerts`` extra) reads one URL syntax for some hundred services:
``json://host/path`` and ``form://`` for a plain webhook, ``mailto://`` for
e-mail, ``slack://``, ``msteams://``, ``pagerduty://``, ``matrix://``...
Each URL is its own Apprise object, so that a failure names the URL that
failed. A URL holds its service's secrets (a token, a password): nothing here
repeats one; a URL is shown as its position and its service (``URL 2
(mailto)``).

This module is the one part of the bridge that imports Apprise, and only when
URLs are set.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.errors import ValidationError
from bridge.extras import NeedsExtra

logger = logging.getLogger("bridge.alerts")

#: What ``bridge_alert_urls`` takes.
URLS_EXPECTED = (
    "notification URLs in Apprise's syntax (json://host/path, mailto://..., slack://...), "
    "separated by commas or new lines"
)


def alert_urls(text: str) -> tuple[str, ...]:
    """The URLs of ``bridge_alert_urls``: separated by commas or new lines."""
    return tuple(part.strip() for part in re.split(r"[,\n]", text) if part.strip())


def shown(index: int, url: str) -> str:
    """A URL as a message may name it: its position and its service, never the rest."""
    scheme = url.split("://", 1)[0] if "://" in url else "?"
    scheme = scheme if re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]{0,30}", scheme) else "?"
    return f"URL {index + 1} ({scheme})"


class Notifier:
    """Sends an alert to each of ``urls``; :meth:`check` refuses a URL Apprise cannot read."""

    def __init__(self, urls: Sequence[str]) -> None:
        try:
            import apprise
        except ImportError as exc:
            raise NeedsExtra("bridge_alert_urls", "alerts", exc) from None
        self._apprise = apprise
        # Apprise's debug lines may name a URL whole: quiet unless the app chose a level.
        quiet = logging.getLogger("apprise")
        if quiet.level == logging.NOTSET:
            quiet.setLevel(logging.WARNING)
        self._targets: list[tuple[str, Any]] = []
        for index, url in enumerate(urls):
            target = apprise.Apprise()
            if not target.add(url):
                expected = f"a URL Apprise can read ({URLS_EXPECTED}); {shown(index, url)} is not"
                raise ValidationError("bridge_alert_urls", "<hidden>", expected)
            self._targets.append((shown(index, url), target))

    def notify(self, title: str, body: str, done: Collection[int] = ()) -> Delivery:
        """Send ``title`` and ``body`` to every URL but those at the positions ``done``
        (which have it already)."""
        delivered, failed = set(done), []
        for index, (name, target) in enumerate(self._targets):
            if index in delivered:
                continue
            try:
                if target.notify(title=title, body=body):
                    delivered.add(index)
                    continue
            except Exception as exc:  # a plugin's defect: the others still go
                # Its type only: a plugin's message may repeat the URL, secrets and all.
                logger.error("bridge: %s failed: %s", name, type(exc).__name__)
            failed.append(name)
        return Delivery(frozenset(delivered), tuple(failed))


@dataclass(frozen=True)
class Delivery:
    """What :meth:`Notifier.notify` did: the URLs that have the alert (positions), and
    those that refused it (as shown)."""

    delivered: frozenset[int]
    failed: tuple[str, ...]
