// Tests of count (`node test.mjs`).
import assert from "node:assert/strict";
import { loadPlugin } from "../../../guest-sdk/js/load-plugin.mjs";

const { count, ProcessHarness, makeRecord } = loadPlugin(new URL("./app.js", import.meta.url));
const h = new ProcessHarness({ onRecord: count });
for (const [key, expected] of [["a", "1"], ["b", "1"], ["a", "2"]]) {
  assert.deepEqual(h.send(makeRecord("x", key, 9)), [makeRecord(expected, key, 9)]);
}
assert.equal(h.value("a", "count"), 2);
console.log("count: ok");
