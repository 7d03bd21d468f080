"""sandgate: a Python client of the sandgate gateway (standard library only).

    from sandgate import Client
    c = Client("http://127.0.0.1:8080", token)
    run = c.run({"command": ["echo", "hello"]})
    print(run.outcome, run.stdout.text())
"""

from .client import Client, Runs, Sessions
from .errors import ArtifactMismatch, PolicyDenied, SandgateError
from .models import Artifact, Decision, FileDigest, LogEvent, Output, Run, RunPage, Session, Violation

__all__ = [
    "Artifact", "ArtifactMismatch", "Client", "Decision", "FileDigest", "LogEvent", "Output",
    "PolicyDenied", "Run", "RunPage", "Runs", "SandgateError", "Session", "Sessions", "Violation",
]
__version__ = "0.1.0"
