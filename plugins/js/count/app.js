// Process (JavaScript): counts each key's records in the host's keyed
// state (value state `count`, decimal text) and emits the running count.

import * as state from "mailer:plugin/state@0.1.0";

const text = new TextEncoder();
const read = new TextDecoder();

function count(rec) {
  const before = state.get("count");
  const n = (before === undefined ? 0 : Number(read.decode(before))) + 1;
  state.set("count", text.encode(String(n)));
  return [{ key: rec.key, value: text.encode(String(n)), timestamp: rec.timestamp, headers: [] }];
}

const world = processWorld(count);
export const onRecord = world.onRecord;
export const onTimer = world.onTimer;
export const processBatch = world.processBatch;
