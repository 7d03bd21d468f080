"""The gateway's errors as exceptions."""

from __future__ import annotations

from .models import Violation


class SandgateError(Exception):
    """An error answer of the gateway, or a failure to reach it.

    ``code`` is the stable code (SANDGATE-…), ``correlation_id`` the ID
    to quote to an operator, ``field`` the request field at fault (when
    one is), ``details`` the answer's details and ``violations`` the
    policy's findings of a denial.
    """

    def __init__(self, code: str, message: str, *, status: int = 0, correlation_id: str = "",
                 field: str = "", details: dict | None = None):
        self.code = code
        self.message = message
        self.status = status
        self.correlation_id = correlation_id
        self.field = field
        self.details = details or {}
        self.violations = [Violation.from_dict(v) for v in self.details.get("violations") or []]
        super().__init__(self._text())

    def _text(self) -> str:
        text = f"{self.code}: {self.message}"
        for v in self.violations:
            text += f"\n  {v.rule}: {v.message}" + (f" (fix: {v.fix})" if v.fix else "")
        if self.correlation_id:
            text += f" [correlation ID {self.correlation_id}]"
        return text


class PolicyDenied(SandgateError):
    """Policy refused the request: ``violations`` says which rules and why."""


class ArtifactMismatch(SandgateError):
    """The bytes received do not hash to the digest the gateway stored."""


def from_answer(status: int, body: dict | None, correlation_id: str, text: str) -> SandgateError:
    """The exception of an error answer (the error shape, or a proxy's page)."""
    err = (body or {}).get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or not err.get("code"):
        code = {400: "SANDGATE-INVALID-REQUEST", 401: "SANDGATE-UNAUTHENTICATED", 403: "SANDGATE-FORBIDDEN",
                404: "SANDGATE-NOT-FOUND", 409: "SANDGATE-CONFLICT", 413: "SANDGATE-TOO-LARGE",
                429: "SANDGATE-RATE-LIMITED", 503: "SANDGATE-UNAVAILABLE"}.get(status, "SANDGATE-INTERNAL")
        return SandgateError(code, text.strip()[:200] or f"HTTP {status}", status=status,
                             correlation_id=correlation_id)
    details = err.get("details") or {}
    cls = PolicyDenied if err["code"] == "SANDGATE-POLICY-DENIED" else SandgateError
    return cls(err["code"], err.get("message", ""), status=status,
               correlation_id=err.get("correlation_id") or correlation_id,
               field=details.get("field", ""), details=details)
