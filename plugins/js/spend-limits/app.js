// Co-process (JavaScript): the spend-limits example
// (plugins/examples/spend-limits) in JavaScript. Left input: orders keyed
// by customer, held in list state `orders` until the watermark reaches
// their time; right input: limit changes, kept in list state `limits`.
// When an order's timer fires, it is checked against the newest limit at
// or before its time; an order above it leaves as an alert
// `{"order", "customer", "amount", "limit"}`.

import * as state from "mailer:plugin/state@0.1.0";
import * as timers from "mailer:plugin/timers@0.1.0";

const text = new TextEncoder();
const read = new TextDecoder();
const listOf = (name) => state.listGet(name).map((b) => JSON.parse(read.decode(b)));
const append = (name, item) => state.listAppend(name, text.encode(JSON.stringify(item)));

function holdOrder(rec) {
  const order = JSON.parse(read.decode(rec.value));
  if (typeof order.amount !== "number") throw new Error("an order needs a numeric `amount`");
  append("orders", { at: Number(rec.timestamp), order });
  timers.register("event-time", rec.timestamp);
  return [];
}

function changeLimit(rec) {
  const { limit } = JSON.parse(read.decode(rec.value));
  if (typeof limit !== "number") throw new Error("a limit change needs a numeric `limit`");
  append("limits", { from: Number(rec.timestamp), limit });
  return [];
}

// The newest limit at or before `at` (the later one of equal times).
function inForce(limits, at) {
  let best;
  for (const l of limits) if (l.from <= at && (best === undefined || l.from >= best.from)) best = l;
  return best;
}

function replace(name, items) {
  state.clear(name);
  for (const item of items) append(name, item);
}

function check(key, domain, atBig) {
  const at = Number(atBig);
  const held = listOf("orders");
  const limits = listOf("limits");
  const out = [];
  for (const h of held.filter((h) => h.at <= at)) {
    const limit = inForce(limits, h.at);
    if (limit !== undefined && h.order.amount > limit.limit) {
      const alert = { order: h.order.order, customer: read.decode(key), amount: h.order.amount, limit: limit.limit };
      out.push({ key, value: text.encode(JSON.stringify(alert)), timestamp: atBig, headers: [] });
    }
  }
  replace("orders", held.filter((h) => h.at > at));
  const current = inForce(limits, at);
  replace("limits", limits.filter((l) => l.from > at).concat(current === undefined ? [] : [current]));
  return out;
}

const world = coProcessWorld(holdOrder, changeLimit, check);
export const onLeft = world.onLeft;
export const onRight = world.onRight;
export const onTimer = world.onTimer;
export const coProcessBatch = world.coProcessBatch;
