// Tests of bench-sum (`node test.mjs`): those of the Rust plugin.
import assert from "node:assert/strict";
import { loadPlugin } from "../../../guest-sdk/js/load-plugin.mjs";

const { runningSum, ReduceHarness, makeRecord, I64_MAX } = loadPlugin(new URL("./app.js", import.meta.url));
const text = (b) => new TextDecoder().decode(b);

const h = new ReduceHarness(runningSum);
assert.equal(text(h.send(makeRecord("5", "k")).value), "5");
assert.equal(text(h.send(makeRecord("-7", "k")).value), "-2");
assert.throws(() => runningSum(new TextEncoder().encode("x"), makeRecord("1")), /the accumulator is not a 64-bit integer/);
assert.throws(() => runningSum(new TextEncoder().encode(String(I64_MAX)), makeRecord("1")), /the sum overflows/);
console.log("bench-sum: ok");
