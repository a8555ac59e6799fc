// mailer plugins in JavaScript, built into components by componentize-js.
//
// `just plugins` puts this file in front of a plugin's `app.js` and
// componentizes the two as one module. A plugin defines its function and
// exports the world's functions from one of the helpers:
//
//     function shout(rec) { rec.value = upper(rec.value); return rec; }
//     const world = mapWorld(shout);
//     export const map = world.map;
//     export const mapBatch = world.mapBatch;
//
// The host calls each world's batch export with many records in the flat
// encoding of docs/wire-format.md, which this file reads and writes; a
// function that throws fails that record (the operator's `on_error`
// decides what happens to it). Records are `{ key, value, timestamp,
// headers }`: key and value `Uint8Array` (key `undefined` when absent),
// timestamp a `BigInt` of ms, headers `[{ name, value }]`.

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder();

/** The records of a batch (`count:u32 record*`). */
function decodeBatch(buf) {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let at = 0;
  const need = (n) => {
    if (at + n > buf.byteLength) throw new Error(`batch truncated at byte ${at}`);
  };
  const u8 = () => { need(1); return view.getUint8(at++); };
  const u32 = () => { need(4); const v = view.getUint32(at, true); at += 4; return v; };
  const i64 = () => { need(8); const v = view.getBigInt64(at, true); at += 8; return v; };
  const bytes = () => { const n = u32(); need(n); const b = buf.slice(at, at + n); at += n; return b; };
  const records = [];
  for (let i = u32(); i > 0; i--) {
    const flags = u8();
    const key = flags & 1 ? bytes() : undefined;
    const value = bytes();
    const timestamp = i64();
    const headers = [];
    for (let h = u32(); h > 0; h--) headers.push({ name: textDecoder.decode(bytes()), value: bytes() });
    records.push({ key, value, timestamp, headers });
  }
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
  i64(v) { this.room(8); new DataView(this.buf.buffer).setBigInt64(this.len, BigInt(v), true); this.len += 8; }
  bytes(b) { this.u32(b.length); this.room(b.length); this.buf.set(b, this.len); this.len += b.length; }
  record(r) {
    this.u8(r.key === undefined || r.key === null ? 0 : 1);
    if (r.key !== undefined && r.key !== null) this.bytes(r.key);
    this.bytes(r.value);
    this.i64(r.timestamp ?? 0n);
    const headers = r.headers ?? [];
    this.u32(headers.length);
    for (const h of headers) { this.bytes(textEncoder.encode(h.name)); this.bytes(h.value); }
  }
  finish() { return this.buf.slice(0, this.len); }
}

/** The answer to a batch: per input record an `Error` (failed) or its
 *  result: a record (`map`), a boolean (`filter`) or records (`flat_map`,
 *  `process`). */
function encodeOutcomes(outcomes, kind) {
  const w = new Writer();
  w.u32(outcomes.length);
  for (const o of outcomes) {
    if (o instanceof Error) {
      w.u8(1);
      w.bytes(textEncoder.encode(o.message || o.name));
    } else if (kind === "map") {
      w.u8(0); w.record(o);
    } else if (kind === "filter") {
      w.u8(0); w.u8(o ? 1 : 0);
    } else {
      w.u8(0); w.u32(o.length);
      for (const r of o) w.record(r);
    }
  }
  return w.finish();
}

function each(fn, records) {
  return records.map((r) => {
    try {
      return fn(r);
    } catch (e) {
      return e instanceof Error ? e : new Error(String(e));
    }
  });
}

/** A typed export: the result, or a thrown `{ message }`. */
function typed(fn) {
  return (...args) => {
    try {
      return fn(...args);
    } catch (e) {
      throw { message: e instanceof Error ? e.message : String(e) };
    }
  };
}

/** The exports of a map plugin: `fn` returns one record per record. */
function mapWorld(fn) {
  return { map: typed(fn), mapBatch: (input) => encodeOutcomes(each(fn, decodeBatch(input)), "map") };
}

/** The exports of a filter plugin: `fn` keeps (true) or drops a record. */
function filterWorld(fn) {
  return { filter: typed(fn), filterBatch: (input) => encodeOutcomes(each(fn, decodeBatch(input)), "filter") };
}

/** The exports of a flat-map plugin: `fn` returns zero or more records. */
function flatMapWorld(fn) {
  return { flatMap: typed(fn), flatMapBatch: (input) => encodeOutcomes(each(fn, decodeBatch(input)), "flat_map") };
}

/** The exports of a keyed process plugin: `fn(record)` returns the records
 *  to emit; the plugin imports the host's keyed state itself
 *  (`import * as state from "mailer:plugin/state@0.1.0"`). */
function processWorld(fn) {
  return {
    onRecord: typed(fn),
    onTimer: () => [],
    processBatch: (input) => encodeOutcomes(each(fn, decodeBatch(input)), "process"),
  };
}

/** The exports of a keyed co-process plugin: `onLeft(record)` and
 *  `onRight(record)` return the records to emit for a record of the left
 *  and of the right input, `onTimer(key, domain, at)` those of a due timer
 *  (none when absent). Both inputs share the key's state and timers, which
 *  the plugin imports itself (`mailer:plugin/state@0.1.0`,
 *  `mailer:plugin/timers@0.1.0`). */
function coProcessWorld(onLeft, onRight, onTimer) {
  return {
    onLeft: typed(onLeft),
    onRight: typed(onRight),
    onTimer: typed(onTimer ?? (() => [])),
    coProcessBatch: (input) =>
      encodeOutcomes(each(input[0] === 0 ? onLeft : onRight, decodeBatch(input.subarray(1))), "process"),
  };
}
