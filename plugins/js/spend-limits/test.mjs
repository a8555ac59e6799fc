// Tests of spend-limits (`node test.mjs`): those of the Rust example.
import assert from "node:assert/strict";
import { loadPlugin } from "../../../guest-sdk/js/load-plugin.mjs";

const { holdOrder, changeLimit, check, ProcessHarness, makeRecord } = loadPlugin(new URL("./app.js", import.meta.url));
const operator = { onLeft: holdOrder, onRight: changeLimit, onTimer: check };
const order = (id, amount, at) => makeRecord(`{"order":${id},"amount":${amount}}`, "bob", at);
const limit = (l, at) => makeRecord(`{"limit":${l}}`, "bob", at);
const values = (records) => records.map((r) => new TextDecoder().decode(r.value));

// An order meets the limit of its time, whichever input came first.
let h = ProcessHarness.coProcess(operator);
h.sendRight(limit(100, 0));
assert.deepEqual(h.send(order(1, 90, 500)), []);
assert.deepEqual(h.send(order(2, 90, 1500)), []);
h.sendRight(limit(50, 1000)); // arrives after the order at 1 500
assert.deepEqual(values(h.advanceWatermark(2000)), ['{"amount":90,"customer":"bob","limit":50,"order":2}']);

// No limit, no alert; old limits are dropped.
h = ProcessHarness.coProcess(operator);
h.send(order(1, 1e9, 10));
assert.deepEqual(h.advanceWatermark(10), []);
h.sendRight(limit(5, 20));
h.sendRight(limit(7, 30));
h.send(order(2, 6, 40));
assert.deepEqual(h.advanceWatermark(40), []);
assert.deepEqual(h.timers("bob"), []);
assert.deepEqual(h.list("bob", "limits"), [{ from: 30, limit: 7 }]);
h.send(order(3, 8, 50));
assert.equal(h.advanceWatermark(50).length, 1);

// Malformed input is an error.
h = ProcessHarness.coProcess(operator);
assert.throws(() => h.send(makeRecord('{"order":1}', "bob")), /numeric `amount`/);
assert.throws(() => h.sendRight(makeRecord("{}", "bob")), /numeric `limit`/);
console.log("spend-limits: ok");
