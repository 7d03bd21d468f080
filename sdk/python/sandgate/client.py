"""Client: the gateway's API over urllib (the standard library only)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any, BinaryIO

from .errors import ArtifactMismatch, SandgateError, from_answer
from .models import Artifact, Decision, FileDigest, LogEvent, Run, RunPage, Session

_CHUNK = 64 << 10


class _Transport:
    """One gateway and one token: requests, error answers, streams."""

    def __init__(self, url: str, token: str, timeout: float):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"gateway URL {url!r}: must be http(s)://host[:port]")
        self.base = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def open(self, method: str, path: str, *, query: dict | None = None, body: Any = None,
             headers: dict | None = None, timeout: float | None = None):
        """The answer to a request, open; an error answer raises."""
        q = {k: v for k, v in (query or {}).items() if v not in (None, "", False)}
        url = self.base + path + ("?" + urllib.parse.urlencode(q) if q else "")
        h = {"Authorization": f"Bearer {self.token}", "User-Agent": "sandgate-python/0.1.0"}
        h.update(headers or {})
        data = body
        if body is not None and not isinstance(body, (bytes, bytearray)) and not hasattr(body, "read"):
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(url, data=data, method=method, headers=h)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read(1 << 20)
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            raise from_answer(e.code, parsed, e.headers.get("X-Correlation-ID", ""),
                              raw.decode("utf-8", "replace")) from None
        except urllib.error.URLError as e:
            raise SandgateError("SANDGATE-UNAVAILABLE", f"{method} {self.base}{path}: {e.reason}") from None

    def json(self, method: str, path: str, **kw) -> Any:
        with self.open(method, path, **kw) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None


def _seg(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _wait(seconds: float | None) -> str | None:
    return f"{seconds:g}s" if seconds else None


class Runs:
    """The runs the caller may see: get, list, cancel, follow, artifacts."""

    def __init__(self, t: _Transport):
        self._t = t

    def get(self, run_id: str) -> Run:
        return Run.from_dict(self._t.json("GET", f"/v1/runs/{_seg(run_id)}"))

    def list(self, *, state: str = "", outcome: str = "", session_id: str = "", task_id: str = "",
             limit: int = 0, cursor: str = "") -> RunPage:
        d = self._t.json("GET", "/v1/runs", query={"state": state, "outcome": outcome, "session_id": session_id,
                                                    "task_id": task_id, "limit": limit or None, "cursor": cursor})
        return RunPage(runs=[Run.from_dict(r) for r in d.get("runs") or []], next_cursor=d.get("next_cursor"))

    def cancel(self, run_id: str) -> Run:
        return Run.from_dict(self._t.json("DELETE", f"/v1/runs/{_seg(run_id)}"))

    def follow(self, run_id: str, *, last_event_id: str = "") -> Iterator[LogEvent]:
        """The run's log stream as it happens, through its exit event."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        with self._t.open("GET", f"/v1/runs/{_seg(run_id)}/logs", query={"follow": "true"},
                          headers=headers, timeout=24 * 3600) as resp:
            ev_id, ev, data = "", "", []
            for raw in resp:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line == "":
                    if data or ev:
                        yield LogEvent.parse(ev_id, ev, "\n".join(data))
                    ev, data = "", []
                    continue
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "id":
                    ev_id = value
                elif name == "event":
                    ev = value
                elif name == "data":
                    data.append(value)

    def artifacts(self, run_id: str) -> list[Artifact]:
        d = self._t.json("GET", f"/v1/runs/{_seg(run_id)}/artifacts")
        return [Artifact.from_dict(a) for a in d.get("artifacts") or []]

    def download(self, run_id: str, path: str, dest: str | os.PathLike | BinaryIO) -> Artifact:
        """Streams one artifact to dest (a file name or a binary file).

        The bytes' SHA-256 must be the one the gateway stored (its ETag);
        otherwise ArtifactMismatch, and a file dest named here is removed.
        """
        url = f"/v1/runs/{_seg(run_id)}/artifacts/" + "/".join(_seg(s) for s in path.split("/"))
        own = not hasattr(dest, "write")
        out = open(dest, "wb") if own else dest
        try:
            with self._t.open("GET", url) as resp:
                want = resp.headers.get("ETag", "").strip('"').removeprefix("sha256:")
                h, n = hashlib.sha256(), 0
                while chunk := resp.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                    n += len(chunk)
            if h.hexdigest() != want:
                raise ArtifactMismatch("SANDGATE-INTERNAL", f"artifact {path}: got bytes with SHA-256 "
                                       f"{h.hexdigest()}, the gateway stored {want}")
        except BaseException:
            if own:
                out.close()
                os.unlink(dest)
            raise
        if own:
            out.close()
        return Artifact(path=path, size=n, sha256=want)


class Sessions:
    """Sessions: open, exec, files, close."""

    def __init__(self, t: _Transport):
        self._t = t

    def open(self, spec: dict) -> Session:
        return Session.from_dict(self._t.json("POST", "/v1/sessions", body=spec, timeout=max(self._t.timeout, 300)))

    def get(self, session_id: str) -> Session:
        return Session.from_dict(self._t.json("GET", f"/v1/sessions/{_seg(session_id)}"))

    def close(self, session_id: str) -> Session:
        return Session.from_dict(self._t.json("DELETE", f"/v1/sessions/{_seg(session_id)}"))

    def exec(self, session_id: str, command: list[str], *, wait: float = 300, **fields: Any) -> Run:
        """Runs command in the session; the run, finished when wait sufficed."""
        body = {"command": command, **fields}
        return Run.from_dict(self._t.json("POST", f"/v1/sessions/{_seg(session_id)}/runs", body=body,
                                          query={"wait": _wait(wait)}, timeout=wait + 60))

    def put_file(self, session_id: str, path: str, data: bytes | BinaryIO, *, mode: int = 0) -> FileDigest:
        """Writes data (bytes or a binary file, streamed) as path of the workspace."""
        q = {"path": path, "mode": format(mode, "o") if mode else None}
        d = self._t.json("PUT", f"/v1/sessions/{_seg(session_id)}/files", query=q, body=data,
                         headers={"Content-Type": "application/octet-stream"})
        return FileDigest.from_dict(d)

    def get_file(self, session_id: str, path: str, dest: str | os.PathLike | BinaryIO | None = None) -> bytes | None:
        """The file path of the workspace: its bytes, or streamed to dest."""
        with self._t.open("GET", f"/v1/sessions/{_seg(session_id)}/files", query={"path": path}) as resp:
            if dest is None:
                return resp.read()
            if hasattr(dest, "write"):
                shutil.copyfileobj(resp, dest, _CHUNK)
            else:
                with open(dest, "wb") as f:
                    shutil.copyfileobj(resp, f, _CHUNK)
        return None


class Client:
    """A client of the sandgate gateway at url, authenticated by token.

    >>> c = Client("http://127.0.0.1:8080", token)
    >>> run = c.run({"command": ["echo", "hi"]})
    >>> run.stdout.text()
    'hi\\n'
    """

    def __init__(self, url: str, token: str, *, timeout: float = 60):
        self._t = _Transport(url, token, timeout)
        self.runs = Runs(self._t)
        self.sessions = Sessions(self._t)

    def run(self, spec: dict, *, wait: float = 300, idempotency_key: str = "") -> Run:
        """Submits spec and waits up to wait seconds for its end.

        A denial raises PolicyDenied with the violations.
        """
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return Run.from_dict(self._t.json("POST", "/v1/runs", body=spec, query={"wait": _wait(wait)},
                                          headers=headers, timeout=wait + 60))

    def review(self, spec: dict) -> Decision:
        """What policy would decide of spec, without running it."""
        return Decision.from_dict(self._t.json("POST", "/v1/admission/review", body=spec))

    def whoami(self) -> dict:
        return self._t.json("GET", "/v1/whoami")
