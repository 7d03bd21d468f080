// The CommonJS build loads with require and has the same surface.
const { test } = require("node:test");
const assert = require("node:assert/strict");

test("require(@sandgate/sdk)", () => {
  const sdk = require("@sandgate/sdk");
  assert.equal(typeof sdk.Client, "function");
  assert.equal(typeof sdk.SandgateError, "function");
  const c = new sdk.Client("http://127.0.0.1:1", "t");
  assert.equal(typeof c.runs.follow, "function");
  assert.equal(typeof c.sessions.putFile, "function");
  assert.throws(() => new sdk.Client("ftp://x", "t"), TypeError);
});
