// Process (JavaScript): counts each key's records in the host's keyed
// state (value state `count`) and emits the running count.

import * as state from "mailer:plugin/state@0.1.0";
import * as timers from "mailer:plugin/timers@0.1.0";

function count(rec, ctx) {
  const n = ctx.value("count");
  const total = (n.get() ?? 0) + 1;
  n.set(total);
  ctx.emit(rec.key, String(total));
}

const world = processWorld({ onRecord: count }, { state, timers });
export const onRecord = world.onRecord;
export const onTimer = world.onTimer;
export const processBatch = world.processBatch;
