// Tests of card-declines (`node test.mjs`): those of the Rust example.
import assert from "node:assert/strict";
import { loadPlugin } from "../../../guest-sdk/js/load-plugin.mjs";

const { flagDeclines, forget, ProcessHarness, makeRecord } = loadPlugin(new URL("./app.js", import.meta.url));
const operator = { onRecord: flagDeclines, onTimer: forget };
const payment = (card, status, at) => makeRecord(`{"card":"${card}","status":"${status}"}`, card, at);

// Three declines within a minute flag the card once.
let h = new ProcessHarness(operator);
assert.deepEqual(h.send(payment("c1", "declined", 1000)), []);
assert.deepEqual(h.send(payment("c1", "approved", 2000)), []);
assert.deepEqual(h.send(payment("c1", "declined", 30000)), []);
const alert = h.send(payment("c1", "declined", 60000));
assert.deepEqual(alert, [makeRecord('{"card":"c1","declines":3,"first":1000,"last":60000}', "c1", 60000n)]);
assert.deepEqual(h.send(payment("c1", "declined", 61000)), []);

// Declines a minute apart do not add up.
h = new ProcessHarness(operator);
for (const at of [0, 40000]) h.send(payment("c2", "declined", at));
h.advanceWatermark(60000);
assert.deepEqual(h.send(payment("c2", "declined", 70000)), []);
assert.equal(h.timers("c2").length, 2);
assert.deepEqual(h.list("c2", "declines"), [40000, 70000]);

// Timers unflag a card, so a new burst alerts again.
h = new ProcessHarness(operator);
for (const at of [0, 1, 2]) h.send(payment("c3", "declined", at));
assert.equal(h.value("c3", "flagged"), true);
h.advanceWatermark(200000);
assert.equal(h.value("c3", "flagged"), undefined);
for (const at of [300000, 300001]) assert.deepEqual(h.send(payment("c3", "declined", at)), []);
assert.equal(h.send(payment("c3", "declined", 300002)).length, 1);

// A payment that is not JSON is an error.
assert.throws(() => new ProcessHarness(operator).send(makeRecord("nope", "c1")), SyntaxError);
console.log("card-declines: ok");
