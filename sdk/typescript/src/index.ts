// @sandgate/sdk: a fetch-based client of sandgate's HTTP API (Node 18+).
// The wire types are generated from gateway/api/openapi.json into
// schema.ts by openapi-typescript (npm run generate; npm run
// check-generated fails when it is stale).

import type { components } from "./schema.js";

type Schemas = components["schemas"];
export type RunSpec = Schemas["RunSpec"];
export type Run = Schemas["Run"];
export type RunList = Schemas["RunList"];
export type Decision = Schemas["Decision"];
export type Violation = Schemas["Violation"];
export type Artifact = Schemas["Artifact"];
export type SessionRequest = Schemas["SessionRequest"];
export type Session = Schemas["Session"];
export type ExecRequest = Schemas["ExecRequest"];
export type FileResult = Schemas["FileResult"];
export type ErrorDetail = Schemas["ErrorDetail"];
export type { components, paths } from "./schema.js";

/** An error answer of the gateway, or a failure to reach it. */
export class SandgateError extends Error {
  /** The stable code, SANDGATE-…. */
  readonly code: string;
  readonly status: number;
  /** The ID to quote to an operator. */
  readonly correlationId: string;
  /** The request field at fault, when one is. */
  readonly field: string;
  readonly details: Record<string, unknown>;
  /** A denial's findings: each rule, its reason and the policy's fix. */
  readonly violations: Violation[];

  constructor(code: string, message: string, opts: { status?: number; correlationId?: string; details?: Record<string, unknown> } = {}) {
    const details = opts.details ?? {};
    const violations = Array.isArray(details.violations) ? (details.violations as Violation[]) : [];
    let text = `${code}: ${message}`;
    for (const v of violations) text += `\n  ${v.rule}: ${v.message}${v.fix ? ` (fix: ${v.fix})` : ""}`;
    if (opts.correlationId) text += ` [correlation ID ${opts.correlationId}]`;
    super(text);
    this.name = "SandgateError";
    this.code = code;
    this.status = opts.status ?? 0;
    this.correlationId = opts.correlationId ?? "";
    this.field = typeof details.field === "string" ? details.field : "";
    this.details = details;
    this.violations = violations;
  }
}

/** One event of a run's log stream: stdout, stderr, state or exit. */
export interface LogEvent {
  id: string;
  event: string;
  data: Record<string, any>;
  /** The bytes of a stdout or stderr event (empty for the others). */
  chunk: Uint8Array;
}

const statusCodes: Record<number, string> = {
  400: "SANDGATE-INVALID-REQUEST", 401: "SANDGATE-UNAUTHENTICATED", 403: "SANDGATE-FORBIDDEN",
  404: "SANDGATE-NOT-FOUND", 409: "SANDGATE-CONFLICT", 413: "SANDGATE-TOO-LARGE",
  429: "SANDGATE-RATE-LIMITED", 503: "SANDGATE-UNAVAILABLE",
};

async function errorOf(resp: Response): Promise<SandgateError> {
  const text = await resp.text();
  const cid = resp.headers.get("X-Correlation-ID") ?? "";
  try {
    const e = JSON.parse(text)?.error;
    if (e && typeof e.code === "string") {
      return new SandgateError(e.code, e.message ?? "", { status: resp.status, correlationId: e.correlation_id || cid, details: e.details ?? {} });
    }
  } catch { /* not the error shape: a proxy's page */ }
  return new SandgateError(statusCodes[resp.status] ?? "SANDGATE-INTERNAL", text.trim().slice(0, 200) || `HTTP ${resp.status}`, { status: resp.status, correlationId: cid });
}

const seg = (s: string) => encodeURIComponent(s);
const waitParam = (seconds?: number) => (seconds ? `${seconds}s` : undefined);

function decodeChunk(d: { data?: string; encoding?: string }): Uint8Array {
  const s = d.data ?? "";
  return d.encoding === "base64" ? new Uint8Array(Buffer.from(s, "base64")) : new TextEncoder().encode(s);
}

type Query = Record<string, string | number | undefined>;
interface Req { query?: Query; body?: unknown; headers?: Record<string, string>; raw?: BodyInit }

/** A client of the sandgate gateway at url, authenticated by token. */
export class Client {
  readonly runs: Runs;
  readonly sessions: Sessions;
  private readonly base: string;

  constructor(url: string, private readonly token: string) {
    const u = new URL(url);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`gateway URL ${url}: must be http(s)://host[:port]`);
    this.base = url.replace(/\/+$/, "");
    this.runs = new Runs(this);
    this.sessions = new Sessions(this);
  }

  /** @internal The answer to a request; an error answer throws. */
  async send(method: string, path: string, r: Req = {}): Promise<Response> {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(r.query ?? {})) if (v !== undefined && v !== "" && v !== 0) q.set(k, String(v));
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}`, "User-Agent": "sandgate-typescript/0.1.0", ...r.headers };
    let body = r.raw;
    if (r.body !== undefined) {
      body = JSON.stringify(r.body);
      headers["Content-Type"] ??= "application/json";
    }
    let resp: Response;
    try {
      resp = await fetch(this.base + path + (q.size ? `?${q}` : ""), { method, headers, body, duplex: "half" } as RequestInit);
    } catch (err) {
      throw new SandgateError("SANDGATE-UNAVAILABLE", `${method} ${this.base}${path}: ${(err as Error).message}`);
    }
    if (resp.status >= 400) throw await errorOf(resp);
    return resp;
  }

  /** @internal */
  async json<T>(method: string, path: string, r: Req = {}): Promise<T> {
    return (await (await this.send(method, path, r)).json()) as T;
  }

  /** Submits spec and waits up to wait seconds (300) for its end; a denial throws with the violations. */
  run(spec: RunSpec, opts: { wait?: number; idempotencyKey?: string } = {}): Promise<Run> {
    const headers: Record<string, string> = opts.idempotencyKey ? { "Idempotency-Key": opts.idempotencyKey } : {};
    return this.json("POST", "/v1/runs", { body: spec, query: { wait: waitParam(opts.wait ?? 300) }, headers });
  }

  /** What policy would decide of spec, without running it. */
  review(spec: RunSpec): Promise<Decision> {
    return this.json("POST", "/v1/admission/review", { body: spec });
  }
}

/** The runs the caller may see. */
export class Runs {
  constructor(private readonly c: Client) {}

  get(id: string): Promise<Run> {
    return this.c.json("GET", `/v1/runs/${seg(id)}`);
  }

  list(q: { state?: string; outcome?: string; session_id?: string; task_id?: string; limit?: number; cursor?: string } = {}): Promise<RunList> {
    return this.c.json("GET", "/v1/runs", { query: q });
  }

  cancel(id: string): Promise<Run> {
    return this.c.json("DELETE", `/v1/runs/${seg(id)}`);
  }

  /** The run's log stream as it happens (Server-Sent Events), through its exit event. */
  async *follow(id: string, opts: { lastEventId?: string } = {}): AsyncGenerator<LogEvent> {
    const headers: Record<string, string> = { Accept: "text/event-stream" };
    if (opts.lastEventId) headers["Last-Event-ID"] = opts.lastEventId;
    const resp = await this.c.send("GET", `/v1/runs/${seg(id)}/logs`, { query: { follow: "true" }, headers });
    const decoder = new TextDecoder();
    let buf = "";
    let ev = { id: "", event: "", data: [] as string[] };
    for await (const part of resp.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(part, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (ev.data.length || ev.event) {
            const data = ev.data.length ? JSON.parse(ev.data.join("\n")) : {};
            const name = ev.event || "message";
            yield { id: ev.id, event: name, data, chunk: name === "stdout" || name === "stderr" ? decodeChunk(data) : new Uint8Array() };
          }
          ev = { id: ev.id, event: "", data: [] };
          continue;
        }
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
        if (field === "id") ev.id = value;
        else if (field === "event") ev.event = value;
        else if (field === "data") ev.data.push(value);
      }
    }
  }

  async artifacts(id: string): Promise<Artifact[]> {
    return (await this.c.json<Schemas["ArtifactList"]>("GET", `/v1/runs/${seg(id)}/artifacts`)).artifacts ?? [];
  }

  /**
   * Streams one artifact to the file dest. Its SHA-256 must be the one
   * the gateway stored (the ETag); otherwise the file is removed and
   * the promise rejects with SANDGATE-INTERNAL.
   */
  async download(id: string, path: string, dest: string): Promise<Artifact> {
    const { createHash } = await import("node:crypto");
    const { createWriteStream } = await import("node:fs");
    const { rm } = await import("node:fs/promises");
    const resp = await this.c.send("GET", `/v1/runs/${seg(id)}/artifacts/${path.split("/").map(seg).join("/")}`);
    const want = (resp.headers.get("ETag") ?? "").replace(/^"sha256:|"$/g, "");
    const h = createHash("sha256");
    const out = createWriteStream(dest);
    let size = 0;
    try {
      for await (const part of resp.body as unknown as AsyncIterable<Uint8Array>) {
        h.update(part);
        size += part.length;
        if (!out.write(part)) await new Promise<void>((r) => out.once("drain", () => r()));
      }
      await new Promise<void>((res, rej) => out.end((err?: Error | null) => (err ? rej(err) : res())));
      const got = h.digest("hex");
      if (got !== want) throw new SandgateError("SANDGATE-INTERNAL", `artifact ${path}: got bytes with SHA-256 ${got}, the gateway stored ${want}`);
      return { path, size, sha256: got } as Artifact;
    } catch (err) {
      out.destroy();
      await rm(dest, { force: true });
      throw err;
    }
  }
}

/** Sessions: open, exec, files, close. */
export class Sessions {
  constructor(private readonly c: Client) {}

  open(spec: SessionRequest = {} as SessionRequest): Promise<Session> {
    return this.c.json("POST", "/v1/sessions", { body: spec });
  }

  get(id: string): Promise<Session> {
    return this.c.json("GET", `/v1/sessions/${seg(id)}`);
  }

  close(id: string): Promise<Session> {
    return this.c.json("DELETE", `/v1/sessions/${seg(id)}`);
  }

  /** Runs command in the session; its run, finished when wait (300 s) sufficed. */
  exec(id: string, command: string[], opts: Omit<ExecRequest, "command"> & { wait?: number } = {}): Promise<Run> {
    const { wait, ...rest } = opts;
    return this.c.json("POST", `/v1/sessions/${seg(id)}/runs`, { body: { command, ...rest }, query: { wait: waitParam(wait ?? 300) } });
  }

  /** Writes data as the file path of the session's workspace. */
  putFile(id: string, path: string, data: Uint8Array | string, opts: { mode?: number } = {}): Promise<FileResult> {
    return this.c.json("PUT", `/v1/sessions/${seg(id)}/files`, {
      query: { path, mode: opts.mode ? opts.mode.toString(8) : undefined },
      headers: { "Content-Type": "application/octet-stream" }, raw: data as BodyInit,
    });
  }

  /** The bytes of the file path of the session's workspace. */
  async getFile(id: string, path: string): Promise<Uint8Array> {
    const resp = await this.c.send("GET", `/v1/sessions/${seg(id)}/files`, { query: { path } });
    return new Uint8Array(await resp.arrayBuffer());
  }
}
