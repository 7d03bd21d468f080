// The SDK (as built, dist/esm) against a real gateway: SANDGATE_URL and
// SANDGATE_TOKEN. cmd/sandgate/e2e's TestTypeScriptSDK starts the gateway
// and runs npm test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, existsSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, SandgateError } from "@sandgate/sdk";

const url = process.env.SANDGATE_URL;
const token = process.env.SANDGATE_TOKEN ?? "";
const needGateway = { skip: url ? false : "SANDGATE_URL is not set" };
const text = (out) => (out.encoding === "base64" ? Buffer.from(out.data, "base64").toString() : out.data);
const rejectsWith = async (p, code) => {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof SandgateError, `${e}`);
    assert.equal(e.code, code);
    return e;
  }
  assert.fail(`no ${code}`);
};

test("a run: output, exit code, artifacts with their digest", needGateway, async () => {
  const c = new Client(url, token);
  const run = await c.run({ command: ["sh", "-c", "mkdir -p out; printf 'report\\n' > out/r.txt; echo to-stdout; exit 3"], artifacts: ["out/*"] });
  assert.equal(run.state, "finished");
  assert.equal(run.outcome, "failed");
  assert.equal(run.exit_code, 3);
  assert.equal(text(run.stdout), "to-stdout\n");
  const arts = await c.runs.artifacts(run.id);
  assert.deepEqual(arts.map((a) => a.path), ["out/r.txt"]);
  const dest = join(mkdtempSync(join(tmpdir(), "sgts-")), "r.txt");
  const got = await c.runs.download(run.id, "out/r.txt", dest);
  assert.equal(readFileSync(dest, "utf8"), "report\n");
  assert.equal(got.sha256, createHash("sha256").update("report\n").digest("hex"));
  assert.equal((await c.runs.get(run.id)).id, run.id);
  assert.ok((await c.runs.list({ limit: 50 })).runs.some((r) => r.id === run.id));
});

test("follow, resume, cancel", needGateway, async () => {
  const c = new Client(url, token);
  const run = await c.run({ command: ["sh", "-c", "echo one; sleep 1; echo two"] }, { wait: 0 });
  const events = [];
  for await (const e of c.runs.follow(run.id)) events.push(e);
  const out = (es) => Buffer.concat(es.filter((e) => e.event === "stdout").map((e) => e.chunk)).toString();
  assert.equal(out(events), "one\ntwo\n");
  assert.equal(events.at(-1).event, "exit");
  assert.equal(events.at(-1).data.outcome, "succeeded");
  const first = events.findIndex((e) => e.event === "stdout");
  const rest = [];
  for await (const e of c.runs.follow(run.id, { lastEventId: events[first].id })) rest.push(e);
  assert.equal(out(rest), out(events.slice(first + 1)));

  const long = await c.run({ command: ["sleep", "300"] }, { wait: 0 });
  await c.runs.cancel(long.id);
  let last;
  for await (const e of c.runs.follow(long.id)) last = e;
  assert.equal(last.data.outcome, "cancelled");
});

test("a denial names the rule, its reason and the fix", needGateway, async () => {
  const c = new Client(url, token);
  const spec = { command: ["true"], image: "evil/image:1" };
  const e = await rejectsWith(c.run(spec), "SANDGATE-POLICY-DENIED");
  assert.ok(e.correlationId);
  const v = e.violations.find((v) => v.rule === "image_allowlist");
  assert.ok(v && v.message && v.fix.includes("allowed_images"), JSON.stringify(e.violations));
  assert.match(e.message, /image_allowlist/);
  const d = await c.review(spec);
  assert.equal(d.allow, false);
  assert.equal((await c.review({ command: ["true"] })).allow, true);
});

test("bad input: the code and the field", needGateway, async () => {
  const c = new Client(url, token);
  const e = await rejectsWith(c.run({ command: [] }), "SANDGATE-INVALID-REQUEST");
  assert.equal(e.field, "command");
  await rejectsWith(c.runs.get("run-that-is-not"), "SANDGATE-NOT-FOUND");
  await rejectsWith(new Client(url, "not-a-token").runs.list(), "SANDGATE-UNAUTHENTICATED");
});

test("a session: a file in, a command, the file out", needGateway, async () => {
  const c = new Client(url, token);
  const s = await c.sessions.open();
  try {
    assert.equal(s.state, "open");
    const put = await c.sessions.putFile(s.id, "src/in.txt", "from typescript");
    assert.equal(put.bytes, 15);
    const run = await c.sessions.exec(s.id, ["sh", "-c", "tr a-z A-Z < src/in.txt | tee src/out.txt"]);
    assert.equal(run.exit_code, 0);
    assert.equal(text(run.stdout), "FROM TYPESCRIPT");
    assert.equal(Buffer.from(await c.sessions.getFile(s.id, "src/out.txt")).toString(), "FROM TYPESCRIPT");
    await rejectsWith(c.sessions.getFile(s.id, "../../etc/passwd"), "SANDGATE-INVALID-REQUEST");
  } finally {
    assert.equal((await c.sessions.close(s.id)).state, "ended");
  }
});

test("an artifact whose bytes are not the stored ones is refused and removed", async () => {
  const srv = createServer((req, res) => {
    res.writeHead(200, { ETag: `"sha256:${createHash("sha256").update("the stored bytes").digest("hex")}"` });
    res.end("other bytes");
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const c = new Client(`http://127.0.0.1:${srv.address().port}`, "t");
    const dest = join(mkdtempSync(join(tmpdir(), "sgts-")), "a");
    await rejectsWith(c.runs.download("run-1", "a", dest), "SANDGATE-INTERNAL");
    assert.equal(existsSync(dest), false);
  } finally {
    srv.close();
  }
});
