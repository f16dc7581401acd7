"""Which database servers the store runs on: the MySQL and MariaDB releases it accepts.

The schema and the statements of :mod:`bridge.storage` use what both MySQL
8.0 and MariaDB 10.6 have (``FOR UPDATE SKIP LOCKED``, generated columns,
``DATETIME(6)``); an older server would fail in the middle of a migration
or of a fire, so ``migrate`` refuses it first, in one line.
"""

from __future__ import annotations

import re

#: The oldest release of each server the store accepts.
OLDEST = {"MySQL": (8, 0), "MariaDB": (10, 6)}
#: What a refusal says is supported.
SUPPORTED = "MySQL 8.0 or later, MariaDB 10.6 or later"

_RELEASE = re.compile(r"(\d+)\.(\d+)")
_OLD_CLIENTS_PREFIX = "5.5.5-"


def mysql_refusal(version: str) -> str | None:
    """Why a server answering ``SELECT VERSION()`` with ``version`` cannot hold the store,
    or None when it can.

    MariaDB says so in its version (``10.11.6-MariaDB-0+deb12u1``); anything
    else answering the MySQL protocol is taken for MySQL (``8.0.35``). MariaDB
    before 11 may prefix its version with ``5.5.5-`` for old clients' sake.
    """
    server = "MariaDB" if "mariadb" in version.lower() else "MySQL"
    release = version.strip()
    if server == "MariaDB":
        release = release.removeprefix(_OLD_CLIENTS_PREFIX)
    found = _RELEASE.match(release)
    if found is not None and (int(found.group(1)), int(found.group(2))) >= OLDEST[server]:
        return None
    return (
        f"the server is {server} {version.strip() or '(no version given)'}; supported: {SUPPORTED}"
    )
