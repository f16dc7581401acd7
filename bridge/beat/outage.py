"""How beat rides out outages and defects: log once, back off, never crash.

Every piece of beat's work runs through :meth:`Guard.run`. A database or
broker outage is expected: it is logged as one line when it starts and one
when it ends, and beat waits 0.5 s, doubling up to :data:`MAX_BACKOFF`,
between attempts. A conflict the database resolved (a deadlock) is logged
as such, and a store with no bridge tables yet is waited for, said once.
Anything else is a defect or a row the database cannot even return, logged
with its traceback. Either way beat keeps running and tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bridge.beat.fire import PublishFailed
from bridge.beat.schema import SchemaPending
from bridge.storage.database import DatabaseError, error_reason, is_conflict

logger = logging.getLogger("bridge.scheduler")

#: The longest beat waits between attempts while the database is unreachable.
MAX_BACKOFF = 5.0


class Guard:
    """Runs beat's work and turns its failures into a back-off; see the module docstring.

    ``on_database_lost`` is called when the database cannot be reached.
    """

    def __init__(
        self,
        on_database_lost: Callable[[], None],
        on_trouble: Callable[[str], None] = lambda kind: None,
    ) -> None:
        self.on_database_lost = on_database_lost
        #: Told the kind of each trouble as it begins (``database``, ``broker``, ...).
        self.on_trouble = on_trouble
        self.backoff = 0.0
        #: The kind of trouble last logged, until work succeeds again.
        self._outage: str | None = None

    def run(self, work: Callable[[], float | None]) -> float:
        """``work``'s result (seconds to wait, 0 for None), or the back-off if it failed."""
        try:
            result = work()
        except DatabaseError as exc:
            reason = error_reason(exc)
            if is_conflict(exc):
                # A deadlock or serialization failure the database broke: transient.
                self._trouble(reason, f"database conflict ({reason}); retrying", "conflict")
            else:
                self.on_database_lost()
                self._trouble("database", f"database unreachable ({reason}); retrying with backoff")
            return self.backoff
        except PublishFailed as exc:
            self._trouble("broker", f"broker unreachable ({exc}); retrying with backoff")
            return self.backoff
        except SchemaPending as exc:
            self._trouble("schema", str(exc))
            return self.backoff
        except Exception as exc:
            message = f"tick failed ({type(exc).__name__}: {exc}); retrying with backoff"
            self._trouble(message, message, "defect", with_traceback=True)
            return self.backoff
        if self._outage is not None:
            logger.warning("bridge: recovered; ticking again")
            self._outage = None
        self.backoff = 0.0
        return 0.0 if result is None else float(result)

    def _trouble(
        self, kind: str, message: str, counted: str = "", with_traceback: bool = False
    ) -> None:
        """Back off; log ``message`` unless trouble of this ``kind`` is already logged.

        ``counted`` names the trouble for the metrics (``kind`` itself by default).
        """
        self.backoff = min(MAX_BACKOFF, max(0.5, self.backoff * 2))
        if self._outage != kind:
            logger.error("bridge: %s", message, exc_info=with_traceback)
            self.on_trouble(counted or kind)
        self._outage = kind
