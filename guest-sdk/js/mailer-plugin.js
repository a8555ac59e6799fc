// mailer plugins in JavaScript, built into components by componentize-js.
//
// The build puts this file in front of a plugin's `app.js` and
// componentizes the two as one module. A plugin writes its functions and
// exports the world's functions from the helper of its world:
//
//     function shout(rec) { rec.value = upper(rec.value); return rec; }
//     const world = mapWorld(shout);
//     export const map = world.map;
//     export const mapBatch = world.mapBatch;
//
// | helper | the functions it takes |
// |---|---|
// | `mapWorld(fn)` | `fn(rec) -> record` |
// | `filterWorld(fn)` | `fn(rec) -> boolean` (true keeps the record) |
// | `flatMapWorld(fn)` | `fn(rec) -> [record]` |
// | `reduceWorld(fn)` | `fn(accumulator, rec) -> bytes`: the key's accumulator (undefined for its first record) in, the new one out |
// | `processWorld({ onRecord, onTimer }, { state, timers })` | `onRecord(rec, ctx)` and `onTimer(timer, ctx)`; `ctx` (a `Context`) holds the key's state and timers and takes the records to emit |
// | `coProcessWorld({ onLeft, onRight, onTimer }, { state, timers })` | as `processWorld`, a function per input; both share the key's state and timers |
// | `joinWorld(fn)` | `fn(left, right) -> [record]` (one side undefined for a record without a partner) |
// | `windowWorld(fn)` | `fn(key, window, records, out)`: a window's key, bounds and records in arrival order; its results go to `out` (an `Emit`) |
// | `aggregateWorld({ create, add, merge, finish })` | `create() -> acc`, `add(acc, rec) -> acc`, `merge(acc, later) -> acc`, `finish(acc) -> bytes`; accumulators are JSON values |
//
// A keyed plugin imports the host's state and timers itself and hands them
// to its helper (`import * as state from "mailer:plugin/state@0.1.0"`,
// `import * as timers from "mailer:plugin/timers@0.1.0"`).
//
// The host calls each world's batch export with many records in the flat
// encoding of docs/wire-format.md, which this file reads and writes; a
// function that throws fails that record (or window) only (the operator's
// `on_error` decides what happens to it). Records are `{ key, value,
// timestamp, headers }`: key and value `Uint8Array` (key `undefined` when
// absent; a string given is sent as UTF-8), timestamp a `BigInt` of ms (a
// whole number given is converted), headers `[{ name, value }]`.
//
// Keyed state and aggregate accumulators are stored as JSON, as the Rust SDK
// stores them, so a plugin in another language (or a later version of this
// one) reads them back. Each world has a harness (`ProcessHarness`,
// `ReduceHarness`, `WindowHarness`, `AggregateHarness`, …) that runs its
// functions in Node as the host would, with in-memory state and a fake clock.

const {
  I64_MIN, I64_MAX, MAX_EMITTED, parseI64, valueText, valueI64, makeRecord, decodeBatch, encodeOutcomes, Emit,
  mapWorld, filterWorld, flatMapWorld, reduceWorld, processWorld, coProcessWorld, joinWorld, windowWorld, aggregateWorld,
  MapHarness, FilterHarness, FlatMapHarness, JoinHarness, ReduceHarness, ProcessHarness, WindowHarness, AggregateHarness,
} = (() => {
  // The SDK's own names stay in here, out of the plugin's way: the plugin
  // shares this module's scope and sees only the names returned at the end.

  const textEncoder = new TextEncoder();
  const textDecoder = new TextDecoder();
  const strictDecoder = new TextDecoder("utf-8", { fatal: true });
  /** The range of the host's 64-bit integers (event times, the watermark). */
  const I64_MIN = -(1n << 63n);
  const I64_MAX = (1n << 63n) - 1n;
  /** Records one call may emit at most. */
  const MAX_EMITTED = 1000000;
  const MALFORMED = "mailer host sent a malformed batch";

  /** What `v` is, for an error message. */
  function kindOf(v) {
    return v === null ? "null" : Array.isArray(v) ? "an array" : typeof v;
  }

  /** `v` as bytes: a Uint8Array as it is, a string as UTF-8. Byte arrays
   *  the host hands over may come from another realm (they are not
   *  `instanceof Uint8Array` here), so any typed array is viewed as bytes. */
  function toBytes(what, v) {
    if (v instanceof Uint8Array) return v;
    if (typeof v === "string") return textEncoder.encode(v);
    if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
    throw new TypeError(`${what} must be a Uint8Array or a string, not ${kindOf(v)}`);
  }

  /** `v` as a 64-bit time in ms: a BigInt, or a whole number. */
  function toTime(what, v) {
    if (typeof v === "bigint") return v;
    if (Number.isSafeInteger(v)) return BigInt(v);
    throw new TypeError(`${what} must be a BigInt or a whole number (ms), not ${kindOf(v)} ${String(v)}`);
  }

  /** ASCII decimal digits with an optional leading `-` or `+` as a BigInt;
   *  undefined when empty, not all digits, or outside the 64-bit range (as
   *  the Rust SDK's `parse_i64` reads). */
  function parseI64(bytes) {
    const text = textDecoder.decode(bytes);
    if (!/^[-+]?[0-9]+$/.test(text)) return undefined;
    const n = BigInt(text);
    return n >= I64_MIN && n <= I64_MAX ? n : undefined;
  }

  /** A record's value as UTF-8 text, or an error naming the problem. */
  function valueText(rec) {
    try {
      return strictDecoder.decode(rec.value);
    } catch (e) {
      throw new Error(`value is not UTF-8: ${e.message}`);
    }
  }

  /** A record's value as a decimal integer (ASCII digits with an optional
   *  sign) within the 64-bit range, as a BigInt; or an error naming it. */
  function valueI64(rec) {
    const n = parseI64(rec.value);
    if (n === undefined) throw new Error(`value ${JSON.stringify(textDecoder.decode(rec.value))} is not a 64-bit integer`);
    return n;
  }

  /** A record: `value` and `key` bytes or strings (key optional), event time
   *  in ms (0 when absent), no headers. */
  function makeRecord(value, key, timestamp = 0n) {
    return checked({ key, value, timestamp, headers: [] });
  }

  /** `rec` as the host takes it, or an error naming what is wrong. */
  function checked(rec) {
    if (rec === null || typeof rec !== "object" || Array.isArray(rec)) {
      throw new TypeError(`expected a record { key, value, timestamp, headers }, not ${kindOf(rec)}`);
    }
    const headers = rec.headers ?? [];
    if (!Array.isArray(headers)) throw new TypeError(`a record's headers must be an array, not ${kindOf(headers)}`);
    return {
      key: rec.key === undefined || rec.key === null ? undefined : toBytes("a record's key", rec.key),
      value: toBytes("a record's value", rec.value),
      timestamp: toTime("a record's timestamp", rec.timestamp ?? 0n),
      headers: headers.map((h) => ({ name: String(h.name), value: toBytes("a header's value", h.value) })),
    };
  }

  function recordList(records) {
    if (!Array.isArray(records)) throw new TypeError(`expected an array of records, not ${kindOf(records)}`);
    return records;
  }

  function kept(keep) {
    if (typeof keep !== "boolean") throw new TypeError(`a filter function returns true or false, not ${kindOf(keep)}`);
    return keep;
  }

  function messageOf(e) {
    return e instanceof Error ? e.message || e.name : String(e);
  }

  // The flat encoding of docs/wire-format.md.

  /** Reads a batch. */
  class Reader {
    constructor(buf) {
      this.buf = buf;
      this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
      this.at = 0;
    }
    need(n) {
      if (this.at + n > this.buf.byteLength) throw new Error(`batch truncated at byte ${this.at}`);
    }
    u8() { this.need(1); return this.view.getUint8(this.at++); }
    u32() { this.need(4); const v = this.view.getUint32(this.at, true); this.at += 4; return v; }
    i64() { this.need(8); const v = this.view.getBigInt64(this.at, true); this.at += 8; return v; }
    bytes() { const n = this.u32(); this.need(n); const b = this.buf.slice(this.at, this.at + n); this.at += n; return b; }
    /** `0:u8` (undefined) or `1:u8 bytes`. */
    option() { return this.u8() ? this.bytes() : undefined; }
    record() {
      const flags = this.u8();
      const key = flags & 1 ? this.bytes() : undefined;
      const value = this.bytes();
      const timestamp = this.i64();
      const headers = [];
      for (let h = this.u32(); h > 0; h--) headers.push({ name: textDecoder.decode(this.bytes()), value: this.bytes() });
      return { key, value, timestamp, headers };
    }
    /** `0:u8` (undefined) or `1:u8 record`. */
    maybeRecord() { return this.u8() ? this.record() : undefined; }
    /** `count:u32` then `count` times `read()`. */
    many(read) {
      const out = [];
      for (let i = this.u32(); i > 0; i--) out.push(read());
      return out;
    }
    batch() { return this.many(() => this.record()); }
    end() {
      const left = this.buf.byteLength - this.at;
      if (left !== 0) throw new Error(`${MALFORMED}: ${left} bytes after its end`);
    }
  }

  /** The records of a batch (`count:u32 record*`). */
  function decodeBatch(buf) {
    const r = new Reader(buf);
    const records = r.batch();
    r.end();
    return records;
  }

  /** A growing little-endian byte buffer. */
  class Writer {
    constructor() { this.buf = new Uint8Array(256); this.len = 0; }
    room(n) {
      if (this.len + n <= this.buf.length) return;
      const next = new Uint8Array(Math.max(this.buf.length * 2, this.len + n));
      next.set(this.buf.subarray(0, this.len));
      this.buf = next;
    }
    u8(v) { this.room(1); this.buf[this.len++] = v; }
    u32(v) { this.room(4); new DataView(this.buf.buffer).setUint32(this.len, v, true); this.len += 4; }
    i64(v) { this.room(8); new DataView(this.buf.buffer).setBigInt64(this.len, v, true); this.len += 8; }
    bytes(b) { this.u32(b.length); this.room(b.length); this.buf.set(b, this.len); this.len += b.length; }
    record(rec) {
      const r = checked(rec);
      this.u8(r.key === undefined ? 0 : 1);
      if (r.key !== undefined) this.bytes(r.key);
      this.bytes(r.value);
      this.i64(r.timestamp);
      this.u32(r.headers.length);
      for (const h of r.headers) { this.bytes(textEncoder.encode(h.name)); this.bytes(h.value); }
    }
    /** `count:u32 record*`: a batch, and a flat-map style outcome. */
    records(records) {
      const list = recordList(records);
      this.u32(list.length);
      for (const r of list) this.record(r);
    }
    finish() { return this.buf.slice(0, this.len); }
  }

  /** How each world's batch export writes one successful outcome. */
  const PUT = {
    map: (w, rec) => w.record(rec),
    filter: (w, keep) => w.u8(kept(keep) ? 1 : 0),
    flat_map: (w, records) => w.records(records),
    reduce: (w, acc) => w.bytes(toBytes("an accumulator", acc)),
    process: (w, records) => w.records(records),
    co_process: (w, records) => w.records(records),
    join: (w, records) => w.records(records),
    window: (w, records) => w.records(records),
    aggregate: (w, value) => w.bytes(toBytes("an accumulator or result", value)),
  };

  /** The answer to a batch of world `kind` (`map`, `filter`, `flat_map`,
   *  `reduce`, `process`, `co_process`, `join`, `window`, `aggregate`): per
   *  input an `Error` (it failed) or its result: a record (map), a boolean
   *  (filter), bytes (reduce, aggregate) or records (the others). A result
   *  that cannot be sent fails its input. */
  function encodeOutcomes(outcomes, kind) {
    const put = PUT[kind];
    const w = new Writer();
    w.u32(outcomes.length);
    for (let o of outcomes) {
      const mark = w.len;
      if (!(o instanceof Error)) {
        try {
          w.u8(0);
          put(w, o);
          continue;
        } catch (e) {
          w.len = mark;
          o = e;
        }
      }
      w.u8(1);
      w.bytes(textEncoder.encode(messageOf(o)));
    }
    return w.finish();
  }

  /** `step(item)` per item, or the error it threw. */
  function each(step, items) {
    return items.map((item) => {
      try {
        return step(item);
      } catch (e) {
        return e instanceof Error ? e : new Error(String(e));
      }
    });
  }

  /** `records` as the host receives them: encoded and decoded again. */
  function wire(records) {
    const w = new Writer();
    w.records(records);
    return decodeBatch(w.finish());
  }

  // Keyed state and timers.

  /** `v` as JSON, as the Rust SDK (serde_json) writes it. */
  function toJson(what, v) {
    let text;
    try {
      text = JSON.stringify(v);
    } catch (e) {
      throw new TypeError(`${what} is not JSON: ${e.message}`);
    }
    if (text === undefined) throw new TypeError(`${what} is not JSON: ${kindOf(v)}`);
    return textEncoder.encode(text);
  }

  function fromJson(bytes, problem) {
    try {
      return JSON.parse(textDecoder.decode(bytes));
    } catch (e) {
      throw new Error(`${problem}: ${e.message}`);
    }
  }

  /** One value per key (any JSON value), kept by the host. */
  class ValueState {
    constructor(host, name) { this.host = host; this.name = name; }
    /** The key's value, or undefined when unset (or expired). */
    get() {
      const b = this.host.get(this.name);
      return b == null ? undefined : fromJson(b, `state \`${this.name}\` holds a value of another type`);
    }
    /** Sets the key's value. */
    set(value) { this.host.set(this.name, toJson(`the value of state \`${this.name}\``, value)); }
    /** Removes the key's value. */
    clear() { this.host.clear(this.name); }
  }

  /** A list per key (of JSON values), in the order of appends. */
  class ListState {
    constructor(host, name) { this.host = host; this.name = name; }
    /** The key's items, oldest first (expired ones left out). */
    get() {
      const problem = `state \`${this.name}\` holds a value of another type`;
      return this.host.listGet(this.name).map((b) => fromJson(b, problem));
    }
    /** Appends one item. */
    append(item) { this.host.listAppend(this.name, toJson(`an item of state \`${this.name}\``, item)); }
    /** Replaces the key's items. */
    set(items) {
      this.clear();
      for (const item of items) this.append(item);
    }
    /** Removes every item. */
    clear() { this.host.clear(this.name); }
  }

  /** A map per key (JSON keys and values); entries come back in the order of
   *  their keys' JSON text. */
  class MapState {
    constructor(host, name) { this.host = host; this.name = name; }
    key(k) { return toJson(`a key of state \`${this.name}\``, k); }
    /** The value at `k`, or undefined. */
    get(k) {
      const b = this.host.mapGet(this.name, this.key(k));
      return b == null ? undefined : fromJson(b, `state \`${this.name}\` holds a value of another type`);
    }
    /** Sets `k` to `value`. */
    insert(k, value) { this.host.mapSet(this.name, this.key(k), toJson(`a value of state \`${this.name}\``, value)); }
    /** Removes `k`. */
    remove(k) { this.host.mapRemove(this.name, this.key(k)); }
    /** Every `[key, value]`. */
    entries() {
      const problem = `state \`${this.name}\` holds a value of another type`;
      return this.host.mapEntries(this.name).map(([k, v]) => [fromJson(k, problem), fromJson(v, problem)]);
    }
    /** Removes every entry. */
    clear() { this.host.clear(this.name); }
  }

  /** The current key's timers. Registering the same time twice gives one
   *  timer; each fires once; a deleted one never fires. Times are ms, as
   *  BigInts or whole numbers. A due timer reaches `onTimer` as `{ key,
   *  domain, at }`, `domain` being `"event-time"` or `"processing-time"`. */
  class Timers {
    constructor(host) { this.host = host; }
    /** Fires once the watermark reaches `at`. */
    registerEventTime(at) { this.host.register("event-time", toTime("a timer's time", at)); }
    /** Cancels the event-time timer at `at`. */
    deleteEventTime(at) { this.host.delete("event-time", toTime("a timer's time", at)); }
    /** Fires once the wall clock reaches `at` (ms since the Unix epoch). */
    registerProcessingTime(at) { this.host.register("processing-time", toTime("a timer's time", at)); }
    /** Cancels the processing-time timer at `at`. */
    deleteProcessingTime(at) { this.host.delete("processing-time", toTime("a timer's time", at)); }
    /** The current event-time watermark (`I64_MIN` before the first). */
    watermark() { return this.host.watermark(); }
    /** The current processing time, ms since the Unix epoch. */
    now() { return this.host.now(); }
  }

  /** Where a process, co-process or window function's records go.
   *  `emit(key, value)` gives a record the event time of the record or timer
   *  being handled (a window's last millisecond); `record(rec)` emits a whole
   *  record as it is. `records` holds what was emitted, in order. */
  class Emit {
    constructor(timestamp) { this.timestamp = timestamp; this.records = []; }
    /** Emits `value` (bytes, or a string as UTF-8) under `key`. */
    emit(key, value) { this.record({ key, value, timestamp: this.timestamp, headers: [] }); }
    /** Emits a whole record as it is. */
    record(rec) {
      if (this.records.length >= MAX_EMITTED) throw new Error(`one call emitted more than ${MAX_EMITTED} records`);
      this.records.push(rec);
    }
  }

  /** What a process or co-process function gets with its record or timer:
   *  the key's state by name (`value`, `list`, `map`: kept by the host, so
   *  checkpointed and kept across an upgrade of the plugin), its `timers`,
   *  and `emit` / `record` for its output. */
  class Context extends Emit {
    constructor(state, timers, timestamp) {
      super(timestamp);
      this._state = state;
      this.timers = new Timers(timers);
    }
    /** The key's value state `name`. */
    value(name) { return new ValueState(this._state, name); }
    /** The key's list state `name`. */
    list(name) { return new ListState(this._state, name); }
    /** The key's map state `name`. */
    map(name) { return new MapState(this._state, name); }
  }

  function noResult(result, what) {
    if (result !== undefined) throw new TypeError(`${what} emits its records through \`emit\` or \`record\` and returns nothing`);
  }

  /** A process (or co-process) operator's timer function, with the host's
   *  state and timers its functions reach: the WIT imports, or a harness's
   *  stand-in. */
  class Keyed {
    constructor(state, timers, onTimer) { this.state = state; this.timers = timers; this.onTimer = onTimer; }
    /** `fn`'s records for `rec`, emitted at its event time. */
    call(fn, rec) {
      const ctx = new Context(this.state, this.timers, rec.timestamp);
      noResult(fn(rec, ctx), "a process function");
      return ctx.records;
    }
    /** The timer function's records for `timer`, emitted at its time. */
    fire(timer) {
      if (!this.onTimer) return [];
      const ctx = new Context(this.state, this.timers, timer.at);
      noResult(this.onTimer(timer, ctx), "a timer function");
      return ctx.records;
    }
    batch(fn, input) {
      return encodeOutcomes(each((rec) => this.call(fn, rec), decodeBatch(input)), "process");
    }
  }

  /** The imports a keyed world's helper needs, or an error saying how to
   *  pass them (thrown while the component is built). */
  function keyedImports(helper, functions, imports) {
    if (imports === undefined) {
      throw new TypeError(
        `${helper}(${functions}, { state, timers }) needs the plugin's imports: ` +
          'import * as state from "mailer:plugin/state@0.1.0" and import * as timers from "mailer:plugin/timers@0.1.0"',
      );
    }
    return imports;
  }

  function windowCall(fn, key, window, records) {
    const out = new Emit(window.end - 1n);
    noResult(fn(key, window, records, out), "a window function");
    return out.records;
  }

  function reduceCall(fn, acc, rec) {
    return toBytes("a reduce function's accumulator", fn(acc, rec));
  }

  /** `reduce-in`: each key's accumulator once (a slot), then the records,
   *  each naming its slot; a slot keeps its accumulator after a failure. */
  function reduceSlots(fn, input) {
    const r = new Reader(input);
    const slots = r.many(() => r.option());
    const outcomes = r.many(() => {
      const slot = r.u32();
      const rec = r.record();
      if (slot >= slots.length) throw new Error(`${MALFORMED}: slot ${slot} of ${slots.length}`);
      try {
        slots[slot] = reduceCall(fn, slots[slot], rec);
        return slots[slot];
      } catch (e) {
        return e instanceof Error ? e : new Error(String(e));
      }
    });
    r.end();
    return encodeOutcomes(outcomes, "reduce");
  }

  /** An aggregate's functions over accumulators encoded as JSON, as the host
   *  keeps them. */
  class Aggregate {
    constructor({ create, add, merge, finish }) { this.fns = { create, add, merge, finish }; }
    static decode(acc) { return fromJson(acc, "the accumulator does not decode"); }
    static encode(acc, what) {
      if (acc === undefined) throw new TypeError(`an aggregate's \`${what}\` returns the accumulator, not undefined`);
      return toJson(`the accumulator \`${what}\` returned`, acc);
    }
    create() { return Aggregate.encode(this.fns.create(), "create"); }
    add(acc, rec) { return Aggregate.encode(this.fns.add(Aggregate.decode(acc), rec), "add"); }
    merge(a, b) { return Aggregate.encode(this.fns.merge(Aggregate.decode(a), Aggregate.decode(b)), "merge"); }
    finish(acc) { return toBytes("an aggregate's result", this.fns.finish(Aggregate.decode(acc))); }
    addGroup([acc, records]) {
      let a = acc === undefined ? this.fns.create() : Aggregate.decode(acc);
      for (const rec of records) {
        a = this.fns.add(a, rec);
        if (a === undefined) throw new TypeError("an aggregate's `add` returns the accumulator, not undefined");
      }
      return Aggregate.encode(a, "add");
    }
    /** `aggregate-in`: per (key, window) group its accumulator (none for a
     *  fresh one) and its records; per group the new accumulator out. */
    addBatch(input) {
      const r = new Reader(input);
      const groups = r.many(() => [r.option(), r.batch()]);
      r.end();
      return encodeOutcomes(each((g) => this.addGroup(g), groups), "aggregate");
    }
    finishBatch(input) {
      const r = new Reader(input);
      const accumulators = r.many(() => r.bytes());
      r.end();
      return encodeOutcomes(each((acc) => this.finish(acc), accumulators), "aggregate");
    }
  }

  // The worlds: the functions a plugin exports.

  /** Runs a typed export's `call`; what it throws becomes the export's error. */
  function typed(call) {
    try {
      return call();
    } catch (e) {
      throw { message: messageOf(e) };
    }
  }

  const checkedList = (records) => recordList(records).map(checked);

  /** The exports of a map plugin: `fn` returns one record per record. */
  function mapWorld(fn) {
    return {
      map: (input) => typed(() => checked(fn(input))),
      mapBatch: (input) => encodeOutcomes(each(fn, decodeBatch(input)), "map"),
    };
  }

  /** The exports of a filter plugin: `fn` keeps (true) or drops a record. */
  function filterWorld(fn) {
    return {
      filter: (input) => typed(() => kept(fn(input))),
      filterBatch: (input) => encodeOutcomes(each(fn, decodeBatch(input)), "filter"),
    };
  }

  /** The exports of a flat-map plugin: `fn` returns zero or more records. */
  function flatMapWorld(fn) {
    return {
      flatMap: (input) => typed(() => checkedList(fn(input))),
      flatMapBatch: (input) => encodeOutcomes(each(fn, decodeBatch(input)), "flat_map"),
    };
  }

  /** The exports of a reduce plugin: `fn(accumulator, rec)` folds a record
   *  into its key's accumulator (undefined for the key's first record) and
   *  returns the new one (bytes, or a string as UTF-8). The host keeps one
   *  per key and emits the key and its new accumulator per record. */
  function reduceWorld(fn) {
    return {
      reduce: (accumulator, input) => typed(() => reduceCall(fn, accumulator ?? undefined, input)),
      reduceBatch: (input) => reduceSlots(fn, input),
    };
  }

  /** The exports of a keyed process plugin (after a `key_by`):
   *  `onRecord(rec, ctx)` handles a record and `onTimer(timer, ctx)` (if
   *  any) a due timer of its key; each emits through `ctx` (a `Context`).
   *  `imports` are the plugin's `state` and `timers` imports. */
  function processWorld({ onRecord, onTimer }, imports) {
    const { state, timers } = keyedImports("processWorld", "{ onRecord, onTimer }", imports);
    const keyed = new Keyed(state, timers, onTimer);
    return {
      onRecord: (input) => typed(() => checkedList(keyed.call(onRecord, input))),
      onTimer: (key, domain, at) => typed(() => checkedList(keyed.fire({ key: key ?? undefined, domain, at }))),
      processBatch: (input) => keyed.batch(onRecord, input),
    };
  }

  /** The exports of a keyed co-process plugin: `onLeft(rec, ctx)` and
   *  `onRight(rec, ctx)` handle a record of the left and of the right input,
   *  `onTimer(timer, ctx)` (if any) a due timer; both inputs share the key's
   *  state and timers (`imports`, as for `processWorld`). */
  function coProcessWorld({ onLeft, onRight, onTimer }, imports) {
    const { state, timers } = keyedImports("coProcessWorld", "{ onLeft, onRight, onTimer }", imports);
    const keyed = new Keyed(state, timers, onTimer);
    return {
      onLeft: (input) => typed(() => checkedList(keyed.call(onLeft, input))),
      onRight: (input) => typed(() => checkedList(keyed.call(onRight, input))),
      onTimer: (key, domain, at) => typed(() => checkedList(keyed.fire({ key: key ?? undefined, domain, at }))),
      // `input:u8` (0 left, 1 right), then the records of one key.
      coProcessBatch: (input) => keyed.batch(input[0] === 0 ? onLeft : onRight, input.subarray(1)),
    };
  }

  /** The exports of a join plugin: `fn(left, right)` returns the records of a
   *  joined pair (for a stream-table join, the stream record and the table
   *  row); one side is undefined for a record without a partner that the
   *  join keeps. */
  function joinWorld(fn) {
    return {
      join: (left, right) => typed(() => checkedList(fn(left ?? undefined, right ?? undefined))),
      joinBatch: (input) => {
        const r = new Reader(input);
        const pairs = r.many(() => [r.maybeRecord(), r.maybeRecord()]);
        r.end();
        return encodeOutcomes(each(([left, right]) => fn(left, right), pairs), "join");
      },
    };
  }

  /** The exports of a window plugin: `fn(key, window, records, out)` gets a
   *  window's key, bounds (`{ start, end }`, BigInt ms, `end` excluded) and
   *  records (in arrival order) when it fires, and emits its results through
   *  `out`, at the window's last millisecond. */
  function windowWorld(fn) {
    return {
      window: (key, bounds, input) =>
        typed(() => checkedList(windowCall(fn, key ?? undefined, { start: bounds.start, end: bounds.end }, input))),
      windowBatch: (input) => {
        const r = new Reader(input);
        const windows = r.many(() => [r.option(), { start: r.i64(), end: r.i64() }, r.batch()]);
        r.end();
        return encodeOutcomes(each(([key, window, records]) => windowCall(fn, key, window, records), windows), "window");
      },
    };
  }

  /** The exports of an incremental window aggregate: the host keeps one
   *  accumulator per (key, window), stored as JSON. `create()` starts one,
   *  `add(acc, rec)` returns it grown by a record, `merge(acc, later)` joins
   *  two when session windows merge (`later`'s records came later), and
   *  `finish(acc)` gives the window's result value (bytes, or a string as
   *  UTF-8), emitted under the key at the window's last millisecond. */
  function aggregateWorld(functions) {
    const agg = new Aggregate(functions);
    return {
      create: () => agg.create(),
      add: (accumulator, input) => typed(() => agg.add(accumulator, input)),
      merge: (a, b) => typed(() => agg.merge(a, b)),
      finish: (accumulator) => typed(() => agg.finish(accumulator)),
      addBatch: (input) => agg.addBatch(input),
      finishBatch: (input) => agg.finishBatch(input),
    };
  }

  // The harnesses: each world's functions run as the host runs them, in Node.
  // What they return went through the wire encoding, so it is what the host
  // would receive.

  /** Runs a map function as the host does. */
  class MapHarness {
    constructor(fn) { this.fn = fn; }
    /** The record `fn` makes of `rec`; what it throws, if it fails. */
    send(rec) { return wire([this.fn(checked(rec))])[0]; }
  }

  /** Runs a filter function as the host does. */
  class FilterHarness {
    constructor(fn) { this.fn = fn; }
    /** Whether `fn` keeps `rec`; what it throws, if it fails. */
    send(rec) { return kept(this.fn(checked(rec))); }
  }

  /** Runs a flat-map function as the host does. */
  class FlatMapHarness {
    constructor(fn) { this.fn = fn; }
    /** The records `fn` makes of `rec`; what it throws, if it fails. */
    send(rec) { return wire(this.fn(checked(rec))); }
  }

  /** Runs a join function as the host does. */
  class JoinHarness {
    constructor(fn) { this.fn = fn; }
    /** The records `fn` makes of a pair (one side undefined for a record
     *  without a partner); what it throws, if it fails. */
    send(left, right) {
      const side = (rec) => (rec === undefined ? undefined : checked(rec));
      return wire(this.fn(side(left), side(right)));
    }
  }

  /** A key as the harnesses hold it: bytes as a string of one char per byte
   *  (so strings order as the bytes do); `""` for none. */
  function keyId(key) {
    return key === undefined || key === null ? "" : Array.from(toBytes("a key", key), (b) => String.fromCharCode(b)).join("");
  }

  /** Runs a reduce function as the host does: one accumulator per key, in
   *  memory. A record that fails leaves its key's accumulator as it was. */
  class ReduceHarness {
    constructor(fn) { this.fn = fn; this.accumulators = new Map(); }
    /** What the host emits for `rec`: its key and the key's new accumulator,
     *  at its event time. Throws what `fn` throws. */
    send(rec) {
      const r = checked(rec);
      const acc = reduceCall(this.fn, this.accumulators.get(keyId(r.key)), r);
      this.accumulators.set(keyId(r.key), acc);
      return wire([{ key: r.key, value: acc, timestamp: r.timestamp }])[0];
    }
    /** The accumulator of `key`, undefined before its first record. */
    accumulator(key) { return this.accumulators.get(keyId(key)); }
  }

  /** Runs a window function as the host does when a window fires. */
  class WindowHarness {
    constructor(fn) { this.fn = fn; }
    /** The records `fn` emits for the window `{ start, end }` of `key`
     *  holding `records` (in arrival order); throws what `fn` throws. */
    fire(key, window, records) {
      const bounds = { start: toTime("a window's start", window.start), end: toTime("a window's end", window.end) };
      const k = key === undefined ? undefined : toBytes("a key", key);
      return wire(windowCall(this.fn, k, bounds, records.map(checked)));
    }
  }

  /** Runs an aggregate as the host does: one accumulator per (key, window),
   *  kept encoded as JSON between calls. Windows are `{ start, end }`. */
  class AggregateHarness {
    constructor(functions) { this.agg = new Aggregate(functions); this.windows = new Map(); }
    static id(key, window) { return `${keyId(key)}\u0000${window.start}\u0000${window.end}`; }
    take(key, window) {
      const id = AggregateHarness.id(key, window);
      const acc = this.windows.get(id);
      if (acc === undefined) throw new Error(`no accumulator for that key in [${window.start}, ${window.end}): add a record to it first`);
      this.windows.delete(id);
      return acc;
    }
    /** Adds `rec` to its key's `window` (a fresh accumulator for the window's
     *  first record); throws what the aggregate throws. */
    add(rec, window) {
      const r = checked(rec);
      const id = AggregateHarness.id(r.key, window);
      const acc = this.windows.get(id);
      this.windows.set(id, this.agg.add(acc === undefined ? this.agg.create() : acc, r));
    }
    /** Merges the accumulators of `key`'s `windows` (in order: each one's
     *  records came after the one before) into window `into`, as session
     *  windows merge. */
    merge(key, windows, into) {
      let acc = this.take(key, windows[0]);
      for (const later of windows.slice(1)) acc = this.agg.merge(acc, this.take(key, later));
      this.windows.set(AggregateHarness.id(key, into), acc);
    }
    /** The accumulator of `key`'s `window`, decoded; undefined if it has none. */
    accumulator(key, window) {
      const acc = this.windows.get(AggregateHarness.id(key, window));
      return acc === undefined ? undefined : Aggregate.decode(acc);
    }
    /** The window's result, as the host emits it: the key, the finished
     *  value, the window's last millisecond; the window is then gone. */
    fire(key, window) {
      const value = this.agg.finish(this.take(key, window));
      return wire([{ key, value, timestamp: toTime("a window's end", window.end) - 1n }])[0];
    }
  }

  /** The in-memory stand-in for the host's `state` and `timers` imports,
   *  scoped to the key being handled. State is held per `keyId(key)` and
   *  name; timers per domain, time and key (none apart from empty). */
  class FakeHost {
    constructor() {
      this.values = new Map(); // scope -> bytes
      this.lists = new Map(); // scope -> [bytes]
      this.maps = new Map(); // scope -> Map(keyId -> [key, value])
      this.pending = new Map(); // timer id -> { domain, at, key }
      this.currentWatermark = I64_MIN;
      this.currentTime = 0n;
      this.key = undefined;
      this.inCall = false;
    }
    static scope(key, name) { return `${keyId(key)}\u0000${name}`; }
    static timerId(domain, at, key) { return `${domain}\u0000${at}\u0000${key === undefined ? "-" : "+" + keyId(key)}`; }
    /** Runs `f` with the state in scope for `key`; undoes its changes when it
     *  throws, as the host does. */
    call(key, f) {
      const saved = structuredClone([this.values, this.lists, this.maps, this.pending]);
      this.key = key;
      this.inCall = true;
      try {
        return f();
      } catch (e) {
        [this.values, this.lists, this.maps, this.pending] = saved;
        throw e;
      } finally {
        this.key = undefined;
        this.inCall = false;
      }
    }
    scoped(name) {
      if (!this.inCall) {
        throw new Error("keyed state and timers exist only while a process function runs: in tests, run it with ProcessHarness");
      }
      return FakeHost.scope(this.key, name);
    }
    // The `state` import.
    get(name) { return this.values.get(this.scoped(name)); }
    set(name, value) { this.values.set(this.scoped(name), value); }
    clear(name) {
      const s = this.scoped(name);
      for (const kind of [this.values, this.lists, this.maps]) kind.delete(s);
    }
    listGet(name) { return [...(this.lists.get(this.scoped(name)) ?? [])]; }
    listAppend(name, item) {
      const s = this.scoped(name);
      this.lists.set(s, [...(this.lists.get(s) ?? []), item]);
    }
    mapGet(name, key) { return this.maps.get(this.scoped(name))?.get(keyId(key))?.[1]; }
    mapSet(name, key, value) {
      const s = this.scoped(name);
      if (!this.maps.has(s)) this.maps.set(s, new Map());
      this.maps.get(s).set(keyId(key), [key, value]);
    }
    mapRemove(name, key) { this.maps.get(this.scoped(name))?.delete(keyId(key)); }
    mapEntries(name) { return FakeHost.entries(this.maps.get(this.scoped(name))); }
    /** The `[key, value]` entries of a map state, in key order. */
    static entries(map) {
      const sorted = [...(map ?? new Map())].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return sorted.map(([, entry]) => entry);
    }
    // The `timers` import.
    register(domain, at) {
      this.scoped("");
      this.pending.set(FakeHost.timerId(domain, at, this.key), { domain, at, key: this.key });
    }
    delete(domain, at) {
      this.scoped("");
      this.pending.delete(FakeHost.timerId(domain, at, this.key));
    }
    watermark() { this.scoped(""); return this.currentWatermark; }
    now() { this.scoped(""); return this.currentTime; }
  }

  /** Timers in the order they fire: by domain, time, then key (none first). */
  function timerOrder(a, b) {
    const rank = (t) => [t.domain === "event-time" ? 0 : 1, t.at, t.key === undefined ? "" : "+" + keyId(t.key)];
    const [x, y] = [rank(a), rank(b)];
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
  }

  /** Runs a process (or co-process) operator's functions as the host does,
   *  like the Rust SDK's `mailer_sdk::testing::Harness`: each key's state in
   *  memory, a fake clock for timers (the watermark at `I64_MIN`, processing
   *  time at 0, until advanced). A call that throws passes its error on, its
   *  state changes undone. State lives until cleared (the host's `state_ttl`
   *  is not modelled). Times are BigInts (whole numbers are converted). */
  class ProcessHarness {
    constructor({ onRecord, onTimer }) {
      this.host = new FakeHost();
      this.keyed = new Keyed(this.host, this.host, onTimer);
      this.onRecord = onRecord;
      this.onRight = undefined;
    }
    /** A harness of a co-process operator: `send` hands a record to its left
     *  input, `sendRight` to its right one; both share each key's state and
     *  timers. */
    static coProcess({ onLeft, onRight, onTimer }) {
      const h = new ProcessHarness({ onRecord: onLeft, onTimer });
      h.onRight = onRight;
      return h;
    }
    call(fn, rec) {
      const r = checked(rec);
      return wire(this.host.call(r.key, () => this.keyed.call(fn, r)));
    }
    /** Hands `rec` to the operator (a co-process's left input); the records
     *  it emitted. */
    send(rec) { return this.call(this.onRecord, rec); }
    /** Hands `rec` to a co-process operator's right input. */
    sendRight(rec) {
      if (!this.onRight) throw new TypeError("a process operator has one input: make the harness with ProcessHarness.coProcess");
      return this.call(this.onRight, rec);
    }
    /** Moves the watermark to `to` and fires the event-time timers due, in
     *  time order; what they emitted. */
    advanceWatermark(to) {
      const t = toTime("a watermark", to);
      if (t > this.host.currentWatermark) this.host.currentWatermark = t;
      return this.fire("event-time", t);
    }
    /** Moves the processing-time clock to `to` and fires the processing-time
     *  timers due, in time order; what they emitted. */
    advanceProcessingTime(to) {
      const t = toTime("a time", to);
      if (t > this.host.currentTime) this.host.currentTime = t;
      return this.fire("processing-time", t);
    }
    fire(domain, upto) {
      const due = [...this.host.pending].filter(([, t]) => t.domain === domain && t.at <= upto);
      due.sort(([, a], [, b]) => timerOrder(a, b));
      const out = [];
      for (const [id, timer] of due) {
        if (!this.host.pending.has(id)) continue; // deleted by a timer that fired before it
        this.host.pending.delete(id);
        out.push(...this.host.call(timer.key, () => this.keyed.fire({ ...timer })));
      }
      return wire(out);
    }
    /** The pending timers of `key`, in time order: `[domain, at]` pairs. */
    timers(key) {
      const mine = [...this.host.pending.values()].filter((t) => keyId(t.key) === keyId(key));
      return mine.sort(timerOrder).map((t) => [t.domain, t.at]);
    }
    /** The value state `name` of `key`, decoded; undefined when unset. */
    value(key, name) {
      const b = this.host.values.get(FakeHost.scope(key, name));
      return b === undefined ? undefined : fromJson(b, "state");
    }
    /** The items of list state `name` of `key`, decoded. */
    list(key, name) {
      return (this.host.lists.get(FakeHost.scope(key, name)) ?? []).map((b) => fromJson(b, "state"));
    }
    /** The entries of map state `name` of `key`, decoded, in key order. */
    map(key, name) {
      const entries = FakeHost.entries(this.host.maps.get(FakeHost.scope(key, name)));
      return entries.map(([k, v]) => [fromJson(k, "state"), fromJson(v, "state")]);
    }
  }

  return {
    I64_MIN, I64_MAX, MAX_EMITTED, parseI64, valueText, valueI64, makeRecord, decodeBatch, encodeOutcomes, Emit,
    mapWorld, filterWorld, flatMapWorld, reduceWorld, processWorld, coProcessWorld, joinWorld, windowWorld, aggregateWorld,
    MapHarness, FilterHarness, FlatMapHarness, JoinHarness, ReduceHarness, ProcessHarness, WindowHarness, AggregateHarness,
  };
})();
