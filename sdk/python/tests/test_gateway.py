"""The SDK against a real gateway (SANDGATE_URL, SANDGATE_TOKEN).

cmd/sandgate/e2e's TestPythonSDK starts the gateway, installs the SDK
into a fresh venv with no index (pip install --no-index ./sdk/python)
and runs this file with that venv's python.
"""

import hashlib
import http.server
import io
import os
import tempfile
import threading
import unittest

import sandgate
from sandgate import ArtifactMismatch, Client, PolicyDenied, SandgateError

URL = os.environ.get("SANDGATE_URL", "")
TOKEN = os.environ.get("SANDGATE_TOKEN", "")


@unittest.skipUnless(URL, "SANDGATE_URL is not set")
class GatewayTest(unittest.TestCase):
    def setUp(self):
        self.c = Client(URL, TOKEN)

    def test_installed_not_from_the_tree(self):
        # The venv's copy, installed by pip, is what runs here.
        self.assertIn("site-packages", sandgate.__file__)

    def test_run_output_and_artifact(self):
        run = self.c.run({"command": ["sh", "-c", "mkdir -p out; printf 'report\\n' > out/r.txt; "
                                      "echo to-stdout; echo to-stderr >&2; exit 3"],
                          "artifacts": ["out/*"]})
        self.assertTrue(run.finished)
        self.assertEqual((run.outcome, run.exit_code), ("failed", 3))
        self.assertEqual(run.stdout.text(), "to-stdout\n")
        self.assertEqual(run.stderr.text(), "to-stderr\n")
        self.assertTrue(run.correlation_id)

        arts = self.c.runs.artifacts(run.id)
        self.assertEqual([a.path for a in arts], ["out/r.txt"])
        with tempfile.TemporaryDirectory() as d:
            dest = os.path.join(d, "r.txt")
            got = self.c.runs.download(run.id, "out/r.txt", dest)
            with open(dest, "rb") as f:
                data = f.read()
        self.assertEqual(data, b"report\n")
        self.assertEqual(got.sha256, hashlib.sha256(data).hexdigest())
        self.assertEqual(got.sha256, arts[0].sha256)

        self.assertEqual(self.c.runs.get(run.id).id, run.id)
        page = self.c.runs.list(limit=50)
        self.assertIn(run.id, [r.id for r in page.runs])

    def test_follow(self):
        run = self.c.run({"command": ["sh", "-c", "echo one; sleep 1; echo two"]}, wait=0)
        events = list(self.c.runs.follow(run.id))
        out = b"".join(e.chunk for e in events if e.event == "stdout")
        self.assertEqual(out, b"one\ntwo\n")
        self.assertEqual(events[-1].event, "exit")
        self.assertEqual(events[-1].data["outcome"], "succeeded")
        # Resuming after the first output gives the rest, not it again.
        first = next(i for i, e in enumerate(events) if e.event == "stdout")
        rest = list(self.c.runs.follow(run.id, last_event_id=events[first].id))
        want = b"".join(e.chunk for e in events[first + 1:] if e.event == "stdout")
        self.assertEqual(b"".join(e.chunk for e in rest if e.event == "stdout"), want)
        self.assertEqual(rest[-1].event, "exit")

    def test_cancel(self):
        run = self.c.run({"command": ["sleep", "300"]}, wait=0)
        self.c.runs.cancel(run.id)
        for e in self.c.runs.follow(run.id):
            last = e
        self.assertEqual(last.data["outcome"], "cancelled")

    def test_denial(self):
        spec = {"command": ["true"], "image": "evil/image:1"}
        with self.assertRaises(PolicyDenied) as cm:
            self.c.run(spec)
        e = cm.exception
        self.assertEqual(e.code, "SANDGATE-POLICY-DENIED")
        self.assertTrue(e.correlation_id)
        rules = {v.rule: v for v in e.violations}
        self.assertIn("image_allowlist", rules)
        self.assertIn("allowed_images", rules["image_allowlist"].fix)
        self.assertIn("image_allowlist", str(e))

        d = self.c.review(spec)
        self.assertFalse(d.allow)
        self.assertIn("image_allowlist", [v.rule for v in d.violations])
        self.assertTrue(self.c.review({"command": ["true"]}).allow)

    def test_bad_input(self):
        with self.assertRaises(SandgateError) as cm:
            self.c.run({"command": []})
        self.assertEqual(cm.exception.code, "SANDGATE-INVALID-REQUEST")
        self.assertEqual(cm.exception.field, "command")
        with self.assertRaises(SandgateError) as cm:
            self.c.runs.get("run-that-is-not")
        self.assertEqual(cm.exception.code, "SANDGATE-NOT-FOUND")
        with self.assertRaises(SandgateError) as cm:
            Client(URL, "not-a-token").runs.list()
        self.assertEqual(cm.exception.code, "SANDGATE-UNAUTHENTICATED")

    def test_session(self):
        s = self.c.sessions.open({})
        try:
            self.assertEqual(s.state, "open")
            put = self.c.sessions.put_file(s.id, "src/in.txt", io.BytesIO(b"from python"))
            self.assertEqual(put.bytes, 11)
            self.assertEqual(put.sha256, hashlib.sha256(b"from python").hexdigest())
            run = self.c.sessions.exec(s.id, ["sh", "-c", "tr a-z A-Z < src/in.txt | tee src/out.txt"])
            self.assertEqual((run.exit_code, run.stdout.text()), (0, "FROM PYTHON"))
            self.assertEqual(run.session_id, s.id)
            self.assertEqual(self.c.sessions.get_file(s.id, "src/out.txt"), b"FROM PYTHON")
            with self.assertRaises(SandgateError) as cm:
                self.c.sessions.get_file(s.id, "../../etc/passwd")
            self.assertEqual(cm.exception.code, "SANDGATE-INVALID-REQUEST")
        finally:
            self.assertEqual(self.c.sessions.close(s.id).state, "ended")


class _LyingGateway(http.server.BaseHTTPRequestHandler):
    """Serves an artifact whose bytes are not the ones its ETag names."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("ETag", '"sha256:' + hashlib.sha256(b"the stored bytes").hexdigest() + '"')
        self.end_headers()
        self.wfile.write(b"other bytes")

    def log_message(self, *args):
        pass


class ArtifactCheckTest(unittest.TestCase):
    def test_mismatch_raises_and_removes_the_file(self):
        srv = http.server.HTTPServer(("127.0.0.1", 0), _LyingGateway)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            c = Client(f"http://127.0.0.1:{srv.server_port}", "t")
            with tempfile.TemporaryDirectory() as d:
                dest = os.path.join(d, "a")
                with self.assertRaises(ArtifactMismatch):
                    c.runs.download("run-1", "a", dest)
                self.assertFalse(os.path.exists(dest))
        finally:
            srv.shutdown()


if __name__ == "__main__":
    unittest.main(verbosity=2)
