"""Fixtures the task tests share with others."""

from ..cli.test_traces import spans  # noqa: F401 (a fixture: OpenTelemetry's in-memory spans)
