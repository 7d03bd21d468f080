// The reference TypeScript MCP client (@modelcontextprotocol/sdk) against
// a real gateway's /v1/mcp (streamable HTTP, bearer token) and against
// `sandgate mcp` on stdio (SANDGATE_BIN). cmd/sandgate/e2e's
// TestTypeScriptSDK runs it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const url = process.env.SANDGATE_URL;
const token = process.env.SANDGATE_TOKEN ?? "";
const bin = process.env.SANDGATE_BIN;

async function exercise(transport, name) {
  const mcp = new Client({ name, version: "1.0.0" });
  await mcp.connect(transport);
  try {
    const tools = (await mcp.listTools()).tools.map((t) => t.name).sort();
    assert.deepEqual(tools, ["artifact_read", "review", "run", "session_close", "session_exec", "session_open", "session_read_file", "session_write_file"]);

    const ran = await mcp.callTool({ name: "run", arguments: { command: ["sh", "-c", "mkdir -p out; echo hi > out/a.txt; echo from-ts"], artifacts: ["out/*"] } });
    assert.equal(ran.isError ?? false, false, JSON.stringify(ran.content));
    assert.equal(ran.structuredContent.exit_code, 0);
    assert.equal(ran.structuredContent.stdout.text, "from-ts\n");
    const runId = ran.structuredContent.run_id;
    const logs = await mcp.readResource({ uri: `sandgate://runs/${runId}/logs` });
    assert.match(logs.contents[0].text, /from-ts/);
    const art = await mcp.callTool({ name: "artifact_read", arguments: { run_id: runId, path: "out/a.txt" } });
    assert.equal(art.structuredContent.content, "hi\n");

    // A denial is a tool error with the rule, its reason and the fix.
    const denied = await mcp.callTool({ name: "run", arguments: { command: ["true"], image: "evil/image:1" } });
    assert.equal(denied.isError, true);
    const err = denied.structuredContent.error;
    assert.equal(err.code, "SANDGATE-POLICY-DENIED");
    const v = err.violations.find((v) => v.rule === "image_allowlist");
    assert.ok(v && v.message && v.fix.includes("allowed_images"), JSON.stringify(err));
    assert.match(denied.content[0].text, /image_allowlist/);

    // A session through the tools.
    const opened = await mcp.callTool({ name: "session_open", arguments: {} });
    const sid = opened.structuredContent.session_id;
    await mcp.callTool({ name: "session_write_file", arguments: { session_id: sid, path: "in.txt", content: "mcp from node" } });
    const ex = await mcp.callTool({ name: "session_exec", arguments: { session_id: sid, command: ["sh", "-c", "tr a-z A-Z < in.txt"] } });
    assert.equal(ex.structuredContent.stdout.text, "MCP FROM NODE");
    const closed = await mcp.callTool({ name: "session_close", arguments: { session_id: sid } });
    assert.equal(closed.structuredContent.state, "ended");

    // An unknown tool is a JSON-RPC error, not a crash.
    await assert.rejects(mcp.callTool({ name: "rm_rf", arguments: {} }), /rm_rf|unknown tool|-32602/i);
  } finally {
    await mcp.close();
  }
}

test("the reference MCP client over streamable HTTP", { skip: url ? false : "SANDGATE_URL is not set" }, async () => {
  await exercise(new StreamableHTTPClientTransport(new URL(`${url}/v1/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }), "ts-reference-http");
});

test("the reference MCP client over stdio (sandgate mcp)", { skip: url && bin ? false : "SANDGATE_URL or SANDGATE_BIN is not set" }, async () => {
  await exercise(new StdioClientTransport({
    command: bin, args: ["mcp"],
    env: { ...process.env, SANDGATE_URL: url, SANDGATE_TOKEN: token },
  }), "ts-reference-stdio");
});
