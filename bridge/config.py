"""Settings of the bridge, read from the Celery app with an environment fallback.

Each setting is looked up in the app's configuration first (``bridge_*`` keys,
so it sits beside the rest of the Celery settings), then in the environment
(``BRIDGE_*``), then falls back to a default that suits the embedded SQLite
quick start.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from bridge.errors import ValidationError
from bridge.rules import tokens
from bridge.rules.decisions import Thresholds

T = TypeVar("T")

DEFAULT_DATABASE_URL = "sqlite:///bridge.db"


def _to_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(text)


@dataclass(frozen=True)
class Settings:
    """The bridge's knobs; docs/configuration.md has a table of them, with their meaning."""

    #: SQLAlchemy URL of the schedule store.
    database_url: str = DEFAULT_DATABASE_URL
    #: How long a beat instance's mark on a row stays valid without renewal.
    lease_seconds: float = 30.0
    #: How many due rows one tick claims at most.
    batch_size: int = 500
    #: On PostgreSQL, MySQL or MariaDB and Linux, a burst's batches are marked sent and
    #: advanced by a process of beat's own, beside the next batch (false: by a thread,
    #: sharing the core).
    finishing_process: bool = True
    #: The longest beat sleeps before it looks at the table again, so that a
    #: schedule changed from outside is picked up within this many seconds.
    poll_interval: float = 1.0
    #: A non-final run whose status has not changed for this long can no
    #: longer be expected to finish: it is marked LOST and stops blocking.
    stale_run_seconds: float = 3600.0
    #: A worker whose heartbeat is older than this is dead: the runs it had
    #: received or started are marked LOST. Workers beat every third of it.
    worker_timeout: float = 30.0
    #: Record runs of tasks that the bridge did not send, too.
    record_all_tasks: bool = False
    #: Upsert the app's ``beat_schedule`` into the table when beat starts.
    sync_beat_schedule: bool = True
    #: Longest text kept of a run's result, error or traceback.
    summary_max_chars: int = 2000
    #: How often the recorder retries a write the database refused.
    recorder_retries: int = 3
    #: A schedule due for longer than this without being sent, or a run sent this long
    #: ago without starting, is late (seconds); a schedule's own ``grace`` wins.
    default_grace: float = 60.0
    #: A run going for longer than this overruns (seconds; 0: no limit); a schedule's
    #: own ``max_runtime`` wins.
    default_max_runtime: float = 0.0
    #: Failed occurrences in a row before a schedule is failing and its incident opens;
    #: a schedule's own ``alert_after`` wins.
    default_alert_after: int = 1
    #: Successful runs in a row before a failing schedule recovers and its incident
    #: closes; a schedule's own ``recover_after`` wins.
    default_recover_after: int = 1
    #: The occurrences overlap ``buffer_all`` queues at most per schedule while a run is
    #: open; past it the oldest are dropped and counted as skipped.
    buffer_limit: int = 100
    #: The registered Celery task that receives one alert per incident and one recovery
    #: (empty: incidents are recorded, and no alert is sent).
    alert_task: str = ""
    #: Notification URLs in Apprise's syntax (the ``alerts`` extra), separated by commas or
    #: new lines: each receives the alerts ``alert_task`` does, beside it or instead.
    alert_urls: str = dataclasses.field(default="", repr=False)
    #: An incident still open and not acknowledged is alerted again this often (seconds).
    alert_repeat: float = 3600.0
    #: No beat having ticked for this long is an incident, alerted by the workers (seconds).
    no_beat_alert: float = 120.0
    #: How often each beat's watchdog looks for trouble and prunes history (seconds).
    watchdog_interval: float = 5.0
    #: Final runs kept per schedule: the latest this many (0: all) ...
    history_keep_runs: int = 100
    #: ... and those planned in the last this many days (0: any age); a schedule's own
    #: ``keep_runs`` and ``keep_days`` win.
    history_keep_days: int = 30
    #: Bearer tokens of the HTTP API: the admin token reads and changes, the read
    #: token only reads. Without either, ``bridge serve`` binds loopback only. Named
    #: tokens (``bridge token create``) work beside them.
    api_admin_token: str = dataclasses.field(default="", repr=False)
    api_read_token: str = dataclasses.field(default="", repr=False)
    #: The proxies in front of ``bridge serve`` (addresses and networks, separated by
    #: commas) whose ``Forwarded`` and ``X-Forwarded-For`` headers name the client; from
    #: anyone else those headers are ignored.
    trusted_proxies: str = ""
    #: The largest request body the HTTP API reads, in bytes.
    api_max_body: int = 1_048_576
    #: Per-schedule metrics are exported for at most this many schedules (by name);
    #: past it, only the totals.
    metrics_max_schedules: int = 1000
    #: Where beat serves its own Prometheus metrics (0: it does not).
    beat_metrics_port: int = 0
    #: Flower's address (``http://flower:5555``): the dashboard links each run to its page.
    flower_url: str = ""
    #: Beat opens an OpenTelemetry span per run it sends, whose context travels in the
    #: message headers to the worker's span of the run (the ``otel`` extra).
    tracing: bool = False

    @property
    def alerting(self) -> bool:
        """Whether incidents are alerted: to the alert task, the alert URLs, or both."""
        return bool(self.alert_task or self.alert_urls.strip())

    @property
    def thresholds(self) -> Thresholds:
        """The app's alert thresholds, which a schedule's own ``alert_after`` and
        ``recover_after`` override."""
        return Thresholds(self.default_alert_after, self.default_recover_after)

    @classmethod
    def from_app(cls, app: Any | None = None, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every setting from ``app.conf``, then ``environ``, then the default."""
        conf: Mapping[str, Any] = app.conf if app is not None else {}
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in fields(cls):
            key = f"bridge_{field.name}"
            parse, expected = _PARSERS[
                field.type if isinstance(field.type, str) else field.type.__name__
            ]
            if conf.get(key) is not None:
                raw: Any = conf.get(key)
            elif key.upper() in env:
                raw = env[key.upper()]
            else:
                continue
            shown = "<hidden>" if field.name in SECRETS else raw
            try:
                values[field.name] = parse(str(raw))
            except ValueError:
                raise ValidationError(key, shown, expected) from None
            if isinstance(values[field.name], float) and not math.isfinite(values[field.name]):
                raise ValidationError(key, raw, "a finite number")
            if field.name in _POSITIVE and values[field.name] <= 0:
                raise ValidationError(key, raw, "a number greater than 0")
            if field.name in _NOT_NEGATIVE and values[field.name] < 0:
                raise ValidationError(key, raw, "a number of at least 0")
            if field.name in _AT_MOST and values[field.name] > _AT_MOST[field.name]:
                raise ValidationError(key, raw, f"a number of at most {_AT_MOST[field.name]}")
            if field.name in TOKENS:
                try:
                    values[field.name] = tokens.settings_token(values[field.name])
                except ValueError as exc:
                    raise ValidationError(key, shown, str(exc)) from None
            if field.name == "trusted_proxies":
                try:
                    tokens.trusted_proxies(values[field.name])
                except ValueError:
                    raise ValidationError(key, raw, tokens.PROXIES_EXPECTED) from None
        return cls(**values)


#: Settings whose value is never repeated in a message or a log.
SECRETS = frozenset({"api_admin_token", "api_read_token", "alert_urls"})
#: The settings tokens, held to the rules of a token.
TOKENS = frozenset({"api_admin_token", "api_read_token"})

_POSITIVE = {
    "lease_seconds",
    "batch_size",
    "poll_interval",
    "stale_run_seconds",
    "worker_timeout",
    "summary_max_chars",
    "default_grace",
    "default_alert_after",
    "default_recover_after",
    "buffer_limit",
    "alert_repeat",
    "no_beat_alert",
    "watchdog_interval",
    "api_max_body",
    "metrics_max_schedules",
}
#: Settings with a largest value: past it, the date arithmetic would overflow.
_AT_MOST = {"history_keep_days": 3650}
_NOT_NEGATIVE = {
    "recorder_retries",
    "beat_metrics_port",
    "default_max_runtime",
    "history_keep_runs",
    "history_keep_days",
}

#: How a setting of each type is read, and what a refusal says it expected.
_PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "str": (str, "a text"),
    "float": (float, "a number"),
    "int": (int, "a whole number"),
    "bool": (_to_bool, "true or false"),
}
