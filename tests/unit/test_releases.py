"""Tests of bridge.rules.releases: which schema a process of a release may run against, and
the one line it says when it may not."""

from __future__ import annotations

import pytest

from bridge.rules.releases import Fit, Schema, release_key

KNOWN = ("0001", "0005", "0011", "0012")


def schema(revision: str | None, oldest: str | None = "0.2.0") -> Schema:
    return Schema(revision, "0012", KNOWN, oldest)


@pytest.mark.parametrize(
    ("release", "key"),
    [
        ("0.2.0", (0, 2)),
        ("0.2", (0, 2)),
        ("0.10.1", (0, 10, 1)),
        ("1.0.0rc1", (1,)),
        ("0.3.0.dev2+g1234", (0, 3)),
        ("unknown", None),
    ],
)
def test_releases_compare_by_their_numbers(release: str, key: tuple[int, ...] | None) -> None:
    assert release_key(release) == key


def test_ten_comes_after_nine() -> None:
    assert release_key("0.10.0") > release_key("0.9.0")  # type: ignore[operator]


def test_the_head_matches() -> None:
    assert schema("0012").fit("0.2.0") is Fit.MATCHES
    assert schema("0012").refusal("0.2.0", "db") is None


def test_no_tables_and_an_older_revision_ask_for_migrate() -> None:
    assert schema(None, None).fit("0.2.0") is Fit.EMPTY
    assert schema(None, None).refusal("0.2.0", "db/app") == (
        "schema: database db/app has no bridge tables; this release"
        " (celery-periodic-bridge 0.2.0) expects revision 0012:"
        " run `celery -A APP bridge migrate`"
    )
    # 0.1.0's schema: no record of the oldest release either.
    assert schema("0005", None).fit("0.2.0") is Fit.BEHIND
    assert schema("0005", None).refusal("0.2.0", "db/app") == (
        "schema: database db/app is at revision 0005; this release"
        " (celery-periodic-bridge 0.2.0) expects revision 0012:"
        " run `celery -A APP bridge migrate`"
    )


def test_a_later_schema_that_accepts_this_release_matches() -> None:
    assert schema("0013", "0.2.0").fit("0.2.0") is Fit.MATCHES
    assert schema("0013", "0.1.5").fit("0.2.0") is Fit.MATCHES


def test_a_later_schema_that_needs_a_later_release_asks_for_an_upgrade() -> None:
    assert schema("0013", "0.3.0").fit("0.2.0") is Fit.AHEAD
    assert schema("0013", "0.3.0").refusal("0.2.0", "db/app") == (
        "schema: database db/app is at revision 0013, which needs celery-periodic-bridge"
        " 0.3.0 or later; this release (celery-periodic-bridge 0.2.0) expects revision 0012:"
        " upgrade the package: pip install -U celery-periodic-bridge"
    )
    # Even at this release's own head, if the record says so.
    assert schema("0012", "0.3.0").fit("0.2.0") is Fit.AHEAD


def test_a_later_schema_without_a_record_is_not_trusted() -> None:
    assert schema("0099", None).fit("0.2.0") is Fit.AHEAD
    assert "written by a later release" in str(schema("0099", None).refusal("0.2.0", "db"))


def test_a_release_that_cannot_be_read_is_judged_by_the_revision_alone() -> None:
    assert schema("0012", "0.3.0").fit("unknown") is Fit.MATCHES
    assert schema("0005").fit("unknown") is Fit.BEHIND
