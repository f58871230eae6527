"""The OpenAPI document at /v1/openapi.json is true: it lists exactly the routes the service
has, and requests generated from it (schemathesis, a bounded number per operation, valid and
invalid by the document) never get a 5xx and always get a documented status, content type
and body."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from starlette.routing import Route

from ..conftest import unique_name
from .server import TOKEN

schemathesis = pytest.importorskip("schemathesis")
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = 12  # per operation, on each database: bounded in time
UNDOCUMENTED = {"/", "/login", "/logout", "/assets/{name}"}  # the dashboard's pages


def test_the_document_lists_exactly_the_routes(http, server):
    document = http.get("/v1/openapi.json").json()
    documented = {(path, method.upper()) for path, ops in document["paths"].items()
                  for method in ops}
    served = set()
    for route in server.app.routes:
        if isinstance(route, Route) and route.path not in UNDOCUMENTED:
            path = route.path.replace("{key:path}", "{key}")
            served |= {(path, m) for m in route.methods - {"HEAD"}}
    assert documented == served


def test_generated_requests_get_documented_answers_and_never_a_5xx(http, server):
    document = http.get("/v1/openapi.json").json()
    # one queue name for the run, on this session's table, so generated writes stay there
    queue = unique_name("fuzz")
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(len(ops) for ops in document["paths"].values())
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance]

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case):
                if "queue" in (case.path_parameters or {}):
                    case.path_parameters["queue"] = queue
                if case.headers:  # the token is ours: generated ones only meet the 401
                    case.headers = {k: v for k, v in case.headers.items()
                                    if k.lower() != "authorization"}
                case.call_and_validate(base_url=server.url, checks=checks,
                                       headers={"Authorization": f"Bearer {TOKEN}"},
                                       timeout=30)

            run()
