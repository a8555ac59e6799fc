// Tests of bench-count-sum (`node test.mjs`): those of the Rust plugin,
// and its accumulator's bytes.
import assert from "node:assert/strict";
import { loadPlugin } from "../../../guest-sdk/js/load-plugin.mjs";

const { countSum, world, AggregateHarness, makeRecord } = loadPlugin(new URL("./app.js", import.meta.url));
const text = (b) => new TextDecoder().decode(b);

const h = new AggregateHarness(countSum);
const [a, b, ab] = [{ start: 0, end: 10 }, { start: 5, end: 15 }, { start: 0, end: 15 }];
h.add(makeRecord("5", "k"), a);
h.add(makeRecord("-2", "k"), b);
h.merge("k", [a, b], ab);
assert.deepEqual(h.fire("k", ab), makeRecord('{"count":2,"sum":3}', "k", 14n));
assert.throws(() => h.add(makeRecord("x", "k"), a), /not a 64-bit integer/);

assert.equal(text(world.create()), '{"count":0,"sum":0}');
const max = new TextEncoder().encode('{"count":1,"sum":9007199254740991}');
assert.equal(text(world.merge(max, new TextEncoder().encode('{"count":1,"sum":-1}'))), '{"count":2,"sum":9007199254740990}');
console.log("bench-count-sum: ok");
