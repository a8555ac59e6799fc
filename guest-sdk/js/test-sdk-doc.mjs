// Runs every ```js block of docs/sdk.md as a plugin's test.mjs runs its
// app.js: through load-plugin.mjs, the SDK in front of it, its
// `mailer:plugin/…` imports bound to nothing and its `export`s plain
// declarations. `assert` is Node's node:assert/strict, as the reference
// says (`node test-sdk-doc.mjs`; exits non-zero on a failure).
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadPlugin } from "./load-plugin.mjs";

const doc = new URL("../../docs/sdk.md", import.meta.url);
const text = readFileSync(doc, "utf8");
const blocks = [...text.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => ({
  line: text.slice(0, m.index).split("\n").length,
  code: m[1],
}));
assert.ok(blocks.length > 0, "docs/sdk.md has no ```js block");

globalThis.assert = assert;
const dir = mkdtempSync(join(tmpdir(), "mailer-sdk-doc-"));
let failures = 0;
try {
  for (const { line, code } of blocks) {
    const app = join(dir, `sdk-md-line-${line}.js`);
    writeFileSync(app, code);
    try {
      loadPlugin(app);
    } catch (e) {
      failures++;
      console.error(`FAIL docs/sdk.md:${line}\n${e.stack}`);
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`docs/sdk.md: ${blocks.length - failures} of ${blocks.length} JavaScript examples passed`);
process.exitCode = failures === 0 ? 0 : 1;
