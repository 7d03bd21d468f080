// dist/cjs holds CommonJS under a "type": "module" package: a
// package.json of its own says so to Node.
import { writeFileSync } from "node:fs";
writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), JSON.stringify({ type: "commonjs" }) + "\n");
