"""schemathesis against the published OpenAPI document of a real ``sandbox serve``:
every operation, with generated valid and invalid input (a bounded number of examples),
answers without a server error, with a status code and a body its schema declares, and
refuses a call without the token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis import checks as sc

from .conftest import Server, make_repo, start_hook, start_server, wait_pending

EXAMPLES = 40  # per operation and mode: the whole run stays well under a minute here


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    repo = make_repo(tmp_path_factory.mktemp("schema") / "repo")
    server = start_server(repo)
    try:
        yield server, repo
    finally:
        server.stop()


CHECKS = [sc.not_a_server_error, sc.status_code_conformance, sc.content_type_conformance,
          sc.response_schema_conformance, sc.response_headers_conformance,
          sc.negative_data_rejection, sc.ignored_auth]


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_api_conforms_to_its_schema(served: tuple[Server, Path], mode: str) -> None:
    server, repo = served
    hook = start_hook("make waiting-for-schemathesis", repo)  # one real pending request
    try:
        wait_pending(repo)
        schema = schemathesis.openapi.from_url(server.url + "openapi.json",
                                               headers=server.headers)
        operations = [r.ok() for r in schema.get_all_operations()]
        assert len(operations) == 9  # with the login's two steps
        for op in operations:
            strategy = op.as_strategy(generation_mode=GenerationMode(mode))

            @given(case=strategy)
            @settings(max_examples=EXAMPLES, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            def run(case: Any) -> None:
                # the real token replaces the generated one; a negative case that drops
                # the header a secured operation requires is sent without one (putting
                # it back would make that case valid, and its 200 a false finding)
                secured = bool(case.operation.definition.raw.get("security"))
                dropped = secured and not any(k.lower() == "authorization"
                                              for k in case.headers or {})
                case.call_and_validate(base_url=server.url.rstrip("/"),
                                       headers={} if dropped else server.headers,
                                       checks=CHECKS)

            run()
    finally:
        hook.kill()
        hook.wait()
