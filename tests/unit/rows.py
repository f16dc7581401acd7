"""A ``periodic_task`` row as a plain value, for the pure rules that read one (tests only)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from bridge.rules.policy import Policies

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Row:
    """The columns beat reads of a claimed row; a due ``every 10s`` schedule by default."""

    id: int = 7
    name: str = "report"
    task: str = "proj.tasks.report"
    args: str = "[]"
    kwargs: str = "{}"
    options: str = "{}"
    signature: str | None = None
    timer: str = "every 10s"
    timezone: str = "UTC"
    anchor: datetime = T0
    nextrun: datetime | None = T0
    next_occurrence: datetime | None = T0
    held: datetime | None = None
    retry_plan: datetime | None = None
    retry_attempt: int | None = None
    retry_at: datetime | None = None
    failure_streak: int = 0
    success_streak: int = 0
    failing_since: datetime | None = None
    broken: bool = False
    policy_columns: dict[str, Any] = field(default_factory=lambda: Policies().columns())

    def __getattr__(self, name: str) -> Any:
        # The policy columns (overlap, catchup, start_at, remaining, ...).
        columns = object.__getattribute__(self, "policy_columns")
        if name in columns:
            return columns[name]
        raise AttributeError(name)

    @property
    def start_at(self) -> datetime | None:
        return self.policy_columns["start_at"]  # type: ignore[no-any-return]

    @property
    def end_at(self) -> datetime | None:
        return self.policy_columns["end_at"]  # type: ignore[no-any-return]

    @property
    def remaining(self) -> int | None:
        return self.policy_columns["remaining"]  # type: ignore[no-any-return]

    def with_policies(self, policies: Policies) -> Row:
        return replace(self, policy_columns=policies.columns())

    def with_columns(self, **columns: Any) -> Row:
        """The row with some of its columns written, policy columns included."""
        own = {key: value for key, value in columns.items() if key not in self.policy_columns}
        policy = {key: value for key, value in columns.items() if key in self.policy_columns}
        return replace(self, **own, policy_columns={**self.policy_columns, **policy})
