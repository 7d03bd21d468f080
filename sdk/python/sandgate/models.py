"""The gateway's answers as dataclasses.

Each has ``from_dict``, which keeps the fields it knows and the whole
answer in ``raw`` (a newer gateway may send more).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any


def _get(d: dict, key: str, default: Any = None) -> Any:
    v = d.get(key, default)
    return default if v is None else v


@dataclass
class Violation:
    """One policy rule's finding: its rule, why, and the policy's fix."""

    rule: str
    message: str
    action: str = "deny"
    fix: str = ""
    severity: str = ""
    controls: list[str] = field(default_factory=list)
    count: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> "Violation":
        return cls(rule=_get(d, "rule", ""), message=_get(d, "message", ""),
                   action=_get(d, "action", "deny"), fix=_get(d, "fix", ""),
                   severity=_get(d, "severity", ""), controls=list(_get(d, "controls", [])),
                   count=_get(d, "count", 0))


@dataclass
class Decision:
    """What policy decided of a spec (review, or a denial's details)."""

    allow: bool
    violations: list[Violation]
    warnings: list[Violation]
    policy_revision: str
    decision_id: str
    spec: dict | None
    raw: dict = field(repr=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Decision":
        return cls(allow=bool(d.get("allow")),
                   violations=[Violation.from_dict(v) for v in _get(d, "violations", [])],
                   warnings=[Violation.from_dict(v) for v in _get(d, "warnings", [])],
                   policy_revision=_get(d, "policy_revision", ""),
                   decision_id=_get(d, "decision_id", ""), spec=d.get("spec"), raw=d)


@dataclass
class Output:
    """A run's stdout or stderr as the gateway kept it (bounded)."""

    data: bytes
    bytes: int
    truncated: bool
    sha256: str

    @classmethod
    def from_dict(cls, d: dict | None) -> "Output":
        d = d or {}
        text = _get(d, "data", "")
        data = base64.b64decode(text) if d.get("encoding") == "base64" else text.encode()
        return cls(data=data, bytes=_get(d, "bytes", 0), truncated=bool(d.get("truncated")),
                   sha256=_get(d, "sha256", ""))

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass
class Run:
    """A run: its decision, state and, once finished, its outcome."""

    id: str
    state: str
    outcome: str | None
    exit_code: int | None
    team: str
    principal: str
    correlation_id: str
    decision_id: str
    session_id: str
    stdout: Output
    stderr: Output
    error: dict | None
    warnings: list[str]
    raw: dict = field(repr=False)

    @property
    def finished(self) -> bool:
        return self.state == "finished"

    @classmethod
    def from_dict(cls, d: dict) -> "Run":
        spec = _get(d, "spec", {})
        return cls(id=d["id"], state=_get(d, "state", ""), outcome=d.get("outcome"),
                   exit_code=d.get("exit_code"), team=_get(d, "team", ""),
                   principal=_get(d, "principal", ""), correlation_id=_get(d, "correlation_id", ""),
                   decision_id=_get(d, "decision_id", ""), session_id=_get(spec, "session_id", ""),
                   stdout=Output.from_dict(d.get("stdout")), stderr=Output.from_dict(d.get("stderr")),
                   error=d.get("error"), warnings=list(_get(d, "warnings", [])), raw=d)


@dataclass
class RunPage:
    """One page of a run listing, newest first; ``next_cursor`` the next."""

    runs: list[Run]
    next_cursor: str | None


@dataclass
class Artifact:
    """A file a run kept: its path, size and SHA-256."""

    path: str
    size: int
    sha256: str

    @classmethod
    def from_dict(cls, d: dict) -> "Artifact":
        return cls(path=d["path"], size=_get(d, "size", 0), sha256=_get(d, "sha256", ""))


@dataclass
class Session:
    """A long-lived sandbox that commands run in, one after another."""

    id: str
    state: str
    team: str
    principal: str
    correlation_id: str
    decision_id: str
    end_reason: str
    runs: int
    raw: dict = field(repr=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Session":
        return cls(id=d["id"], state=_get(d, "state", ""), team=_get(d, "team", ""),
                   principal=_get(d, "principal", ""), correlation_id=_get(d, "correlation_id", ""),
                   decision_id=_get(d, "decision_id", ""), end_reason=_get(d, "end_reason", ""),
                   runs=_get(d, "runs", 0), raw=d)


@dataclass
class FileDigest:
    """What a session's file transfer wrote or read: path, kind, size, digest."""

    path: str
    kind: str
    bytes: int
    sha256: str
    entries: int = 0

    @classmethod
    def from_dict(cls, d: dict) -> "FileDigest":
        return cls(path=_get(d, "path", ""), kind=_get(d, "kind", ""), bytes=_get(d, "bytes", 0),
                   sha256=_get(d, "sha256", ""), entries=_get(d, "entries", 0))


@dataclass
class LogEvent:
    """One event of a run's log stream (stdout, stderr, state or exit).

    ``data`` is the event's decoded JSON; ``chunk`` the bytes of a stdout
    or stderr event; ``id`` the position to resume after.
    """

    id: str
    event: str
    data: dict

    @property
    def chunk(self) -> bytes:
        if self.event not in ("stdout", "stderr"):
            return b""
        text = self.data.get("data", "")
        return base64.b64decode(text) if self.data.get("encoding") == "base64" else text.encode()

    @classmethod
    def parse(cls, id: str, event: str, data: str) -> "LogEvent":
        return cls(id=id, event=event or "message", data=json.loads(data) if data else {})
