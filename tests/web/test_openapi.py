"""The OpenAPI document at /v1/openapi.json is true: it lists exactly the routes the service
has, and requests generated from it (schemathesis, a bounded number per operation, valid and
invalid by the document) never get a 5xx and always get a documented status, content type
and body."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from starlette.routing import Route

from sqldelay.web.errors import ApiError
from sqldelay.web.inputs import parse_delay
from sqldelay.web.openapi import openapi_document

from ..conftest import unique_name
from .server import TOKEN

schemathesis = pytest.importorskip("schemathesis")
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    positive_data_acceptance,
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


DURATIONS = ["PT30S", "P1DT2H", "P1W", "PT0.5S", "P1WT1H1M1.25S", "P", "PT", "P1DT", "PT1",
             "P1M", "P1Y", "-PT1S", "PT1.S", "P\u0661D", "PT\u0661\u0662S", "P\uff11D", "p1d"]


@pytest.mark.parametrize("value", DURATIONS)
def test_the_document_takes_the_durations_the_server_takes_and_no_others(value):
    """The delay's pattern is no looser than the server: what it matches, the server takes,
    and nothing else (a client that checks against the document is never refused)."""
    document = openapi_document(max_body=1, max_batch=1)
    [number, text] = document["components"]["schemas"]["MessageIn"]["properties"]["delay"][
        "oneOf"]
    # the document's regular expressions are ECMA-262's; these use nothing Python reads
    # otherwise ([0-9], not \d, which is every script's digits in Python)
    documented = re.search(text["pattern"], value) is not None
    try:
        parse_delay(value)
        served = True
    except ApiError:
        served = False
    assert documented == served


def test_generated_requests_get_documented_answers_and_never_a_5xx(http, server):
    document = http.get("/v1/openapi.json").json()
    # one queue name for the run, on this session's table, so generated writes stay there
    queue = unique_name("fuzz")
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(len(ops) for ops in document["paths"].values())
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance, positive_data_acceptance]

    for operation in operations:
        spec = document["paths"][operation.path][operation.method.lower()]
        # an operation with no parameter, body or token to get wrong (the health check) has
        # no invalid request
        modes = ([GenerationMode.POSITIVE] if not spec["parameters"]
                 and "requestBody" not in spec and spec.get("security") == []
                 else [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
        for mode in modes:
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
