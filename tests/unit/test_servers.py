"""Which MySQL and MariaDB servers may hold the store."""

from __future__ import annotations

import pytest

from bridge.rules.servers import mysql_refusal


@pytest.mark.parametrize(
    "version",
    [
        "8.0.35",
        "8.4.0",
        "9.1.0",
        "10.6.16-MariaDB",
        "10.11.6-MariaDB-0+deb12u1",
        "11.4.2-MariaDB",
        "5.5.5-10.11.6-MariaDB",
    ],
)
def test_supported_servers_are_accepted(version: str) -> None:
    assert mysql_refusal(version) is None


@pytest.mark.parametrize(
    ("version", "server"),
    [("5.7.44", "MySQL"), ("10.5.23-MariaDB", "MariaDB"), ("5.5.5-10.3.39-MariaDB", "MariaDB")],
)
def test_older_servers_are_refused_naming_the_version_and_what_is_supported(
    version: str, server: str
) -> None:
    refusal = mysql_refusal(version)
    assert refusal == (
        f"the server is {server} {version}; supported: MySQL 8.0 or later, MariaDB 10.6 or later"
    )


def test_a_version_that_is_not_a_number_is_refused() -> None:
    assert mysql_refusal("") == (
        "the server is MySQL (no version given); supported: MySQL 8.0 or later,"
        " MariaDB 10.6 or later"
    )
