// Fails when src/schema.ts is not what openapi-typescript makes of
// gateway/api/openapi.json today (run npm run generate, commit the result).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dir = mkdtempSync(join(tmpdir(), "sandgate-schema-"));
try {
  const out = join(dir, "schema.ts");
  execFileSync("npx", ["openapi-typescript", "../../gateway/api/openapi.json", "-o", out], { stdio: "pipe" });
  if (readFileSync(out, "utf8") !== readFileSync(new URL("../src/schema.ts", import.meta.url), "utf8")) {
    console.error("src/schema.ts is stale: run npm run generate in sdk/typescript and commit it");
    process.exit(1);
  }
  console.log("src/schema.ts is current");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
