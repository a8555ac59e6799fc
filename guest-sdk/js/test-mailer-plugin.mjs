// Tests of mailer-plugin.js: the wire format against hand-made bytes, each
// world's batch export, keyed state, timers and the harnesses
// (`node test-mailer-plugin.mjs`; exits non-zero on a failure).
import assert from "node:assert/strict";
import { runInNewContext } from "node:vm";
import { loadPlugin } from "./load-plugin.mjs";

const sdk = loadPlugin();
const {
  decodeBatch, encodeOutcomes, makeRecord, parseI64, valueI64, I64_MIN, I64_MAX,
  mapWorld, reduceWorld, processWorld, coProcessWorld, joinWorld, windowWorld, aggregateWorld,
  MapHarness, FilterHarness, FlatMapHarness, JoinHarness, ReduceHarness, ProcessHarness, WindowHarness, AggregateHarness,
} = sdk;

const enc = (s) => [...new TextEncoder().encode(s)];
const text = (b) => new TextDecoder().decode(b);
function u32(v) {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, v, true);
  return [...b];
}
function i64(v) {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigInt64(0, BigInt(v), true);
  return [...b];
}
const blob = (bytes) => [...u32(bytes.length), ...bytes];
function recordBytes(value, key, ts = 7, headers = []) {
  const out = key === undefined ? [0] : [1, ...blob(enc(key))];
  out.push(...blob(enc(value)), ...i64(ts), ...u32(headers.length));
  for (const [name, v] of headers) out.push(...blob(enc(name)), ...blob(enc(v)));
  return out;
}
const batch = (...records) => [...u32(records.length), ...records.flat()];
const failed = (message) => [1, ...blob(enc(message))];
const bytes = (...parts) => Uint8Array.from(parts.flat());
const values = (records) => records.map((r) => text(r.value));

const tests = [];
const test = (name, fn) => tests.push([name, fn]);

test("decodes records with and without key and headers", () => {
  const [a, b] = decodeBatch(bytes(batch(recordBytes("a"), recordBytes("b", "k", 9, [["h", "v"]]))));
  assert.deepEqual([a.value, a.key, a.timestamp], [Uint8Array.from(enc("a")), undefined, 7n]);
  assert.deepEqual([text(b.key), b.timestamp, b.headers[0].name, text(b.headers[0].value)], ["k", 9n, "h", "v"]);
});

test("a truncated or overlong batch is an error", () => {
  assert.throws(() => decodeBatch(bytes(u32(1), [0, 5])), /truncated/);
  assert.throws(() => decodeBatch(bytes(batch(recordBytes("a")), [0])), /1 bytes after its end/);
});

test("encodes map, filter, flat-map and accumulator outcomes and failures", () => {
  const out = encodeOutcomes([makeRecord("x", "k", 3n), new Error("bad")], "map");
  assert.deepEqual(out, bytes(u32(2), 0, recordBytes("x", "k", 3), failed("bad")));
  assert.deepEqual(encodeOutcomes([true, false], "filter"), bytes(u32(2), [0, 1, 0, 0]));
  const flat = encodeOutcomes([[makeRecord("a"), makeRecord("b")]], "flat_map");
  assert.deepEqual(flat, bytes(u32(1), 0, batch(recordBytes("a", undefined, 0), recordBytes("b", undefined, 0))));
  assert.deepEqual(encodeOutcomes([enc("12")].map((b) => Uint8Array.from(b)), "reduce"), bytes(u32(1), 0, blob(enc("12"))));
});

test("strings are sent as UTF-8 and a result of another type fails its record alone", () => {
  const out = encodeOutcomes([{ key: "k", value: "é", timestamp: 0 }, 5, { value: 3 }], "map");
  const expected = bytes(u32(3), 0, recordBytes("é", "k", 0), failed("expected a record { key, value, timestamp, headers }, not number"));
  assert.deepEqual(out.subarray(0, expected.length), expected);
  assert.deepEqual(out.subarray(expected.length), bytes(failed("a record's value must be a Uint8Array or a string, not number")));
  assert.deepEqual(encodeOutcomes([{ value: "x", timestamp: 1.5 }], "map").subarray(4, 5), bytes(1));
});

test("byte arrays of another realm, as the component's host hands them over, are bytes", () => {
  const foreign = runInNewContext('new Uint8Array([104, 105])');
  assert.equal(foreign instanceof Uint8Array, false);
  const out = encodeOutcomes([{ key: foreign, value: foreign.map((c) => c - 32), timestamp: 1n }], "map");
  assert.deepEqual(out, bytes(u32(1), 0, recordBytes("HI", "hi", 1)));
});

test("integers parse as the Rust SDK parses them", () => {
  for (const [s, n] of [["0", 0n], ["-0", 0n], ["+7", 7n], ["-42", -42n], ["9223372036854775807", I64_MAX], ["-9223372036854775808", I64_MIN]]) {
    assert.equal(parseI64(Uint8Array.from(enc(s))), n, s);
  }
  for (const s of ["", "-", "+", "1x", " 1", "9223372036854775808", "-9223372036854775809", "1.0", "١"]) {
    assert.equal(parseI64(Uint8Array.from(enc(s))), undefined, s);
  }
  assert.throws(() => valueI64(makeRecord("x")), /value "x" is not a 64-bit integer/);
});

function upper(rec) {
  if (rec.value.length === 0) throw new Error("empty");
  return { ...rec, value: text(rec.value).toUpperCase() };
}

test("the map batch export runs the function per record", () => {
  const answer = mapWorld(upper).mapBatch(bytes(batch(recordBytes("hi", "k", 1), recordBytes(""))));
  assert.deepEqual(answer, bytes(u32(2), 0, recordBytes("HI", "k", 1), failed("empty")));
});

test("the join batch export gets each pair with absent sides", () => {
  const pair = (left, right) => [makeRecord([left, right].map((s) => (s ? text(s.value) : "-")).join("+"), (left ?? right).key)];
  const input = bytes(u32(3), 1, recordBytes("a", "k"), 1, recordBytes("b", "k"), 1, recordBytes("c", "j"), 0, 0, 1, recordBytes("d", "i"));
  const expected = [u32(3)];
  for (const [value, key] of [["a+b", "k"], ["c+-", "j"], ["-+d", "i"]]) expected.push(0, batch(recordBytes(value, key, 0)));
  assert.deepEqual(joinWorld(pair).joinBatch(input), bytes(...expected));
});

test("the stateless harnesses return what the host receives", () => {
  assert.deepEqual(new MapHarness(upper).send(makeRecord("a", "k")), makeRecord("A", "k"));
  assert.throws(() => new MapHarness(upper).send(makeRecord("")), /empty/);
  assert.equal(new FilterHarness((r) => r.value.length > 1).send(makeRecord("ab")), true);
  assert.throws(() => new FilterHarness(() => undefined).send(makeRecord("a")), /returns true or false, not undefined/);
  const words = new FlatMapHarness((r) => text(r.value).split(" ").map((w) => makeRecord(w))).send(makeRecord("a b"));
  assert.deepEqual(values(words), ["a", "b"]);
  assert.deepEqual(new JoinHarness((left) => [left]).send(makeRecord("l"), undefined), [makeRecord("l")]);
});

function count(acc, rec) {
  if (text(rec.value) === "x" && acc !== undefined && text(acc) === "2") throw new Error("no third x");
  return String(Number(acc === undefined ? "0" : text(acc)) + 1);
}

test("the reduce batch export folds each slot from its accumulator and keeps it after a failure", () => {
  const records = [[0, "x"], [1, "x"], [1, "x"], [1, "x"], [0, "y"]].map(([slot, v]) => [...u32(slot), ...recordBytes(v)]);
  const input = bytes(u32(2), 1, blob(enc("41")), 0, u32(5), records.flat());
  const ok = (acc) => [0, ...blob(enc(acc))];
  assert.deepEqual(reduceWorld(count).reduceBatch(input), bytes(u32(5), ok("42"), ok("1"), ok("2"), failed("no third x"), ok("43")));
});

test("the reduce harness keeps an accumulator per key", () => {
  const h = new ReduceHarness(count);
  assert.deepEqual(h.send(makeRecord("x", "a", 5n)), makeRecord("1", "a", 5n));
  h.send(makeRecord("x", "a"));
  h.send(makeRecord("x", "b"));
  assert.throws(() => h.send(makeRecord("x", "a")), /no third x/);
  assert.deepEqual([text(h.accumulator("a")), text(h.accumulator("b")), h.accumulator("c")], ["2", "1", undefined]);
});

function pages(key, window, records, out) {
  out.emit(key, `${window.start}..${window.end} ${records.map((r) => text(r.value)).join(",")}`);
}

test("each window gets its records and emits at its end", () => {
  const input = [u32(2)];
  for (const [key, start, vs] of [["k", 0, ["a", "b"]], ["j", 10, ["c"]]]) {
    input.push(1, blob(enc(key)), i64(start), i64(start + 10), batch(...vs.map((v) => recordBytes(v))));
  }
  const expected = bytes(u32(2), 0, batch(recordBytes("0..10 a,b", "k", 9)), 0, batch(recordBytes("10..20 c", "j", 19)));
  assert.deepEqual(windowWorld(pages).windowBatch(bytes(...input)), expected);
});

test("the window harness fires a window, and a function that returns records is told to emit", () => {
  assert.deepEqual(new WindowHarness(pages).fire("k", { start: 0, end: 5 }, [makeRecord("a")]), [makeRecord("0..5 a", "k", 4n)]);
  assert.throws(() => new WindowHarness((k, w, rs) => rs).fire("k", { start: 0, end: 5 }, []), /emits its records through `emit` or `record`/);
});

// The count and sum of a window's values, as the Rust SDK's doc example.
const SUM = {
  create: () => ({ count: 0, sum: 0 }),
  add: (acc, rec) => ({ count: acc.count + 1, sum: acc.sum + Number(valueI64(rec)) }),
  merge: (a, b) => ({ count: a.count + b.count, sum: a.sum + b.sum }),
  finish: (acc) => String(acc.sum),
};
const json = (s) => Uint8Array.from(enc(s));

test("accumulators are compact JSON as serde writes them", () => {
  const world = aggregateWorld(SUM);
  assert.equal(text(world.create()), '{"count":0,"sum":0}');
  assert.equal(text(world.merge(json('{"count":1,"sum":2}'), json('{"count":2,"sum":5}'))), '{"count":3,"sum":7}');
  assert.throws(() => world.finish(json("zz")), (e) => /the accumulator does not decode/.test(e.message));
});

test("add-batch folds each group from its accumulator and reports a failed group", () => {
  const groups = [[undefined, ["1", "2"]], ['{"count":1,"sum":5}', ["x", "3"]], ['{"count":2,"sum":7}', []]];
  const input = [u32(3)];
  for (const [acc, vs] of groups) input.push(acc === undefined ? [0] : [1, ...blob(enc(acc))], batch(...vs.map((v) => recordBytes(v))));
  const expected = bytes(u32(3), 0, blob(enc('{"count":2,"sum":3}')), failed('value "x" is not a 64-bit integer'), 0, blob(enc('{"count":2,"sum":7}')));
  assert.deepEqual(aggregateWorld(SUM).addBatch(bytes(...input)), expected);
});

test("finish-batch finishes each window and reports one that does not decode", () => {
  const out = aggregateWorld(SUM).finishBatch(bytes(u32(3), blob(enc('{"count":2,"sum":9}')), blob(enc("not json")), blob(enc('{"count":1,"sum":-4}'))));
  const first = bytes(u32(3), 0, blob(enc("9")));
  const last = bytes(0, blob(enc("-4")));
  assert.deepEqual([out.subarray(0, first.length), out.subarray(out.length - last.length)], [first, last]);
  assert.match(text(out.subarray(first.length + 5, out.length - last.length)), /^the accumulator does not decode: /);
});

test("the aggregate harness adds, merges and fires per key and window", () => {
  const h = new AggregateHarness(SUM);
  const [first, second, merged] = [{ start: 0, end: 10 }, { start: 8, end: 20 }, { start: 0, end: 20 }];
  h.add(makeRecord("5", "k"), first);
  h.add(makeRecord("-2", "k"), second);
  h.add(makeRecord("100", "j"), first);
  assert.deepEqual(h.accumulator("k", first), { count: 1, sum: 5 });
  h.merge("k", [first, second], merged);
  assert.deepEqual(h.fire("k", merged), makeRecord("3", "k", 19n));
  assert.deepEqual(h.fire("j", first), makeRecord("100", "j", 9n));
  assert.throws(() => h.fire("k", merged), /add a record to it first/);
  assert.throws(() => new AggregateHarness({ ...SUM, add: () => undefined }).add(makeRecord("1"), first), /`add` returns the accumulator, not undefined/);
});

/** Registers and deletes timers as the record says (as the Rust fixture
 *  test-timers). */
function command(rec, ctx) {
  for (const c of text(rec.value).split(";").map((s) => s.trim()).filter(Boolean)) {
    const [verb, at] = c.split(" ");
    const actions = {
      register: (t) => ctx.timers.registerEventTime(t),
      delete: (t) => ctx.timers.deleteEventTime(t),
      "register-processing": (t) => ctx.timers.registerProcessingTime(t),
    };
    if (!(verb in actions)) throw new Error(`unknown command \`${verb}\``);
    actions[verb](BigInt(at));
  }
}

function fired(timer, ctx) {
  const domain = timer.domain === "event-time" ? "event" : "processing";
  ctx.emit(timer.key, `${text(timer.key ?? new Uint8Array())} ${domain} ${timer.at} watermark=${ctx.timers.watermark()}`);
}

const timersOf = { onRecord: command, onTimer: fired };

test("timers fire in time order once and never when deleted", () => {
  const h = new ProcessHarness(timersOf);
  h.send(makeRecord("register 30; register 10; register 10; register 20", "a"));
  h.send(makeRecord("delete 20", "a"));
  h.send(makeRecord("register 5", "b"));
  h.send(makeRecord("delete 5", "b"));
  assert.deepEqual(h.timers("a"), [["event-time", 10n], ["event-time", 30n]]);
  const out = h.advanceWatermark(100);
  assert.deepEqual(values(out), ["a event 10 watermark=100", "a event 30 watermark=100"]);
  assert.deepEqual(out.map((r) => r.timestamp), [10n, 30n]);
  assert.deepEqual(h.advanceWatermark(200), []);
});

test("processing-time timers follow the fake clock", () => {
  const h = new ProcessHarness(timersOf);
  h.send(makeRecord("register-processing 5000; register 7", "c"));
  assert.deepEqual(h.advanceProcessingTime(4999), []);
  assert.deepEqual(values(h.advanceProcessingTime(6000)), [`c processing 5000 watermark=${I64_MIN}`]);
  assert.deepEqual(h.timers("c"), [["event-time", 7n]]);
});

test("a failed record changes no state and sets no timer", () => {
  const h = new ProcessHarness(timersOf);
  h.send(makeRecord("register 10", "a"));
  assert.throws(() => h.send(makeRecord("register 20; explode 5", "a")), /unknown command `explode`/);
  assert.deepEqual(values(h.advanceWatermark(I64_MAX)), [`a event 10 watermark=${I64_MAX}`]);
});

test("each key has its own value, list and map state stored as JSON", () => {
  function remember(rec, ctx) {
    const seen = ctx.value("seen");
    seen.set((seen.get() ?? 0) + 1);
    ctx.list("values").append(text(rec.value));
    const words = ctx.map("words");
    words.insert(text(rec.value), (words.get(text(rec.value)) ?? 0) + 1);
    if (text(rec.value) === "forget") {
      words.remove("a");
      ctx.list("values").set(["x"]);
    }
    ctx.emit(rec.key, JSON.stringify(words.entries()));
  }
  const h = new ProcessHarness({ onRecord: remember });
  let out;
  for (const [key, value] of [["k", "b"], ["k", "a"], ["j", "a"], ["k", "a"]]) out = h.send(makeRecord(value, key, 3));
  assert.deepEqual(out, [makeRecord('[["a",2],["b",1]]', "k", 3)]);
  assert.deepEqual([h.value("k", "seen"), h.value("j", "seen"), h.value("x", "seen")], [3, 1, undefined]);
  assert.deepEqual(h.list("k", "values"), ["b", "a", "a"]);
  assert.deepEqual(h.map("k", "words"), [["a", 2], ["b", 1]]);
  h.send(makeRecord("forget", "k"));
  assert.deepEqual([h.list("k", "values"), h.map("k", "words")], [["x"], [["b", 1], ["forget", 1]]]);
});

test("values that are not JSON and state of another type are errors", () => {
  const store = (rec, ctx) => ctx.value("v").set(10n);
  assert.throws(() => new ProcessHarness({ onRecord: store }).send(makeRecord("x", "k")), /the value of state `v` is not JSON/);
  function corrupt(rec, ctx) {
    ctx._state.set("v", Uint8Array.from(enc("not json")));
    ctx.value("v").get();
  }
  assert.throws(() => new ProcessHarness({ onRecord: corrupt }).send(makeRecord("x", "k")), /state `v` holds a value of another type/);
});

test("a process function that returns records is told to emit", () => {
  const h = new ProcessHarness({ onRecord: (rec) => [rec] });
  assert.throws(() => h.send(makeRecord("x", "k")), /emits its records through `emit` or `record` and returns nothing/);
});

test("a co-process shares state between its inputs", () => {
  const onLeft = (rec, ctx) => ctx.emit(rec.key, `limit ${ctx.value("limit").get()}`);
  const onRight = (rec, ctx) => ctx.value("limit").set(Number(valueI64(rec)));
  const h = ProcessHarness.coProcess({ onLeft, onRight });
  h.sendRight(makeRecord("100", "bob"));
  assert.deepEqual(values(h.send(makeRecord("order", "bob"))), ["limit 100"]);
  assert.throws(() => new ProcessHarness({ onRecord: onLeft }).sendRight(makeRecord("x")), /ProcessHarness.coProcess/);
});

test("the co-process batch export goes to its input's function and a world without imports is refused", () => {
  const onLeft = (rec, ctx) => ctx.emit(rec.key, "L");
  const onRight = () => { throw new Error("no"); };
  const co = coProcessWorld({ onLeft, onRight }, {});
  const records = batch(recordBytes("x", "k", 4));
  assert.deepEqual(co.coProcessBatch(bytes(0, records)), bytes(u32(1), 0, batch(recordBytes("L", "k", 4))));
  assert.deepEqual(co.coProcessBatch(bytes(1, records)), bytes(u32(1), failed("no")));
  assert.deepEqual(co.onTimer(undefined, "event-time", 5n), []);
  assert.throws(() => processWorld({ onRecord: onLeft }), /needs the plugin's imports/);
});

test("the typed exports throw the error record the host expects", () => {
  const world = processWorld({ onRecord: command, onTimer: fired }, { state: undefined, timers: undefined });
  assert.throws(() => world.onRecord(makeRecord("explode 1", "k")), (e) => e.message === "unknown command `explode`");
  assert.deepEqual(mapWorld(upper).map(makeRecord("a")), makeRecord("A"));
});

test("state outside a call is an error that names the harness", () => {
  const kept = [];
  new ProcessHarness({ onRecord: (rec, ctx) => { kept.push(ctx); } }).send(makeRecord("x", "k"));
  assert.throws(() => kept[0].value("v").get(), /ProcessHarness/);
});

let failures = 0;
for (const [name, fn] of tests) {
  try {
    fn();
  } catch (e) {
    failures++;
    console.error(`FAIL ${name}\n${e.stack}`);
  }
}
console.log(`mailer-plugin.js: ${tests.length - failures} of ${tests.length} tests passed`);
process.exitCode = failures === 0 ? 0 : 1;
