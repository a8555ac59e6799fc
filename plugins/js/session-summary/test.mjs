// Tests of session-summary (`node test.mjs`): those of the Rust example.
import assert from "node:assert/strict";
import { loadPlugin } from "../../../guest-sdk/js/load-plugin.mjs";

const { summarise, WindowHarness, makeRecord } = loadPlugin(new URL("./app.js", import.meta.url));
const click = (page, ts) => makeRecord(`{"page":"${page}"}`, undefined, ts);
const h = new WindowHarness(summarise);

const out = h.fire("u1", { start: 100, end: 500 }, [click("/b", 300), click("/a", 100), click("/b", 200)]);
const summary = '{"clicks":3,"end":500,"exit":"/b","landing":"/a","pages":2,"start":100,"user":"u1"}';
assert.deepEqual(out, [makeRecord(summary, "u1", 499n)]);
assert.throws(() => h.fire(undefined, { start: 0, end: 1 }, [makeRecord("x")]), SyntaxError);
console.log("session-summary: ok");
