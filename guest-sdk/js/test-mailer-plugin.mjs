// The wire format of mailer-plugin.js against hand-made bytes
// (`node test-mailer-plugin.mjs`; exits non-zero on a failure).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const source = readFileSync(new URL("./mailer-plugin.js", import.meta.url), "utf8");
const sdk = new Function(`${source}; return { decodeBatch, encodeOutcomes, mapWorld, coProcessWorld };`)();

function recordBytes(value, key, ts) {
  const parts = [key === undefined ? [0] : [1, ...u32(key.length), ...key]];
  parts.push([...u32(value.length), ...value]);
  const t = new Uint8Array(8);
  new DataView(t.buffer).setBigInt64(0, BigInt(ts), true);
  parts.push([...t], u32(0));
  return parts.flat();
}
function u32(v) {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, v, true);
  return [...b];
}
const enc = (s) => [...new TextEncoder().encode(s)];

const batch = Uint8Array.from([...u32(2), ...recordBytes(enc("a"), undefined, 7), ...recordBytes(enc("b"), enc("k"), 9)]);
const [a, b] = sdk.decodeBatch(batch);
assert.deepEqual([a.value, a.key, a.timestamp], [Uint8Array.from(enc("a")), undefined, 7n]);
assert.deepEqual([b.value, b.key, b.timestamp], [Uint8Array.from(enc("b")), Uint8Array.from(enc("k")), 9n]);
assert.throws(() => sdk.decodeBatch(Uint8Array.from([...u32(1), 0, 5])), /truncated/);

const out = sdk.encodeOutcomes([{ key: Uint8Array.from(enc("k")), value: Uint8Array.from(enc("x")), timestamp: 3n }, new Error("bad")], "map");
assert.deepEqual([...out], [...u32(2), 0, ...recordBytes(enc("x"), enc("k"), 3), 1, ...u32(3), ...enc("bad")]);

const world = sdk.mapWorld((r) => ({ ...r, value: r.value.map((c) => c - 32) }));
const answer = world.mapBatch(Uint8Array.from([...u32(1), ...recordBytes(enc("hi"), enc("k"), 1)]));
assert.deepEqual([...answer], [...u32(1), 0, ...recordBytes(enc("HI"), enc("k"), 1)]);
const co = sdk.coProcessWorld((r) => [{ ...r, value: Uint8Array.from(enc("L")) }], () => { throw new Error("no"); });
const left = co.coProcessBatch(Uint8Array.from([0, ...u32(1), ...recordBytes(enc("x"), enc("k"), 4)]));
assert.deepEqual([...left], [...u32(1), 0, ...u32(1), ...recordBytes(enc("L"), enc("k"), 4)]);
const right = co.coProcessBatch(Uint8Array.from([1, ...u32(1), ...recordBytes(enc("x"), enc("k"), 4)]));
assert.deepEqual([...right], [...u32(1), 1, ...u32(2), ...enc("no")]);
assert.deepEqual(co.onTimer(undefined, "event-time", 5n), []);
console.log("mailer-plugin.js: ok");
