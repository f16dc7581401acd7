"""A fuzzer against a real ``celery bridge serve``: schemathesis reads the server's own
``/openapi.json`` and sends every operation bodies, parameters and paths generated from
it, valid and invalid, with the admin token. Not one answer may be a 5xx.

Bounded: a fixed number of examples per operation and mode, no shrinking,
so the run takes seconds (about 25 operations, each called 2 x EXAMPLES
times). A failure lists each offending request as a curl command.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable

from tests.support import redis_broker, served

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("test_fuzz")]

ADMIN = "fuzz-admin-token-0123456789abcdef"
#: Examples per operation and generation mode.
EXAMPLES = 15


@pytest.fixture(scope="module", params=["postgres", "mariadb"])
def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # A broker that answers: a run the fuzzer asks for is sent, not refused 503.
    workdir = tmp_path_factory.mktemp("fuzz")
    with served(workdir, redis_broker(), request.param, BRIDGE_API_ADMIN_TOKEN=ADMIN) as env:
        yield env.server_url


def test_the_fuzzer_finds_no_server_error(url: str) -> None:
    import schemathesis

    headers = {"Authorization": f"Bearer {ADMIN}"}
    # A few schedules for the generated names to sometimes hit.
    for name in ("a", "job", "x"):
        httpx.post(
            url + "/api/v1/schedules",
            json={"name": name, "task": "workers.app.quick", "timer": "every 1h"},
            headers=headers,
        )
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    failures: list[str] = []
    calls = 0
    modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in modes:

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def fuzz(case: Any) -> None:
                nonlocal calls
                calls += 1
                response = case.call(base_url=url, headers=headers, timeout=60)
                if response.status_code >= 500:
                    command = case.as_curl_command(headers=headers)
                    failures.append(f"{response.status_code} {response.text[:200]}: {command}")

            try:
                fuzz()
            except Unsatisfiable:
                continue  # nothing invalid to generate for it (no parameters, no body)
    assert calls > 200
    assert not failures, "\n".join(failures)
    assert httpx.get(url + "/api/v1/schedules", headers=headers).status_code == 200
