"""The service's errors: JSON with a stable ``code`` a client can branch on, the ``field`` of
the request it is about (when one is), and a message for people."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse


class ApiError(Exception):
    """A refused request: ``status`` (4xx), a stable ``code``, the ``field`` at fault."""

    def __init__(self, status: int, code: str, message: str, *,
                 field: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers

    def body(self) -> dict[str, Any]:
        error = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(field: str, message: str, code: str = "invalid") -> ApiError:
    """Bad input in ``field``: 400."""
    return ApiError(400, code, message, field=field)
