// Co-process (JavaScript): the spend-limits example
// (plugins/examples/spend-limits) in JavaScript. Left input: orders keyed
// by customer, held in list state `orders` until the watermark reaches
// their time; right input: limit changes, kept in list state `limits`.
// When an order's timer fires, it is checked against the newest limit at
// or before its time; an order above it leaves as an alert
// `{"amount", "customer", "limit", "order"}`.

import * as state from "mailer:plugin/state@0.1.0";
import * as timers from "mailer:plugin/timers@0.1.0";

const read = new TextDecoder();

/** The number at `field` of a JSON object, or undefined. */
function numberAt(doc, field) {
  const v = doc !== null && typeof doc === "object" ? doc[field] : undefined;
  return typeof v === "number" ? v : undefined;
}

function holdOrder(rec, ctx) {
  const order = JSON.parse(read.decode(rec.value));
  if (numberAt(order, "amount") === undefined) throw new Error("an order needs a numeric `amount`");
  ctx.list("orders").append({ at: Number(rec.timestamp), order });
  ctx.timers.registerEventTime(rec.timestamp);
}

function changeLimit(rec, ctx) {
  const limit = numberAt(JSON.parse(read.decode(rec.value)), "limit");
  if (limit === undefined) throw new Error("a limit change needs a numeric `limit`");
  ctx.list("limits").append({ from: Number(rec.timestamp), limit });
}

/** The newest limit at or before `at` (the later one of equal times). */
function inForce(limits, at) {
  let best;
  for (const l of limits) if (l.from <= at && (best === undefined || l.from >= best.from)) best = l;
  return best;
}

function check(timer, ctx) {
  const at = Number(timer.at);
  const orders = ctx.list("orders");
  const limits = ctx.list("limits");
  const held = orders.get();
  const known = limits.get();
  const customer = read.decode(timer.key ?? new Uint8Array());
  for (const h of held.filter((h) => h.at <= at)) {
    const limit = inForce(known, h.at);
    if (limit !== undefined && h.order.amount > limit.limit) {
      const alert = { amount: h.order.amount, customer, limit: limit.limit, order: h.order.order ?? null };
      ctx.emit(timer.key, JSON.stringify(alert));
    }
  }
  orders.set(held.filter((h) => h.at > at));
  const current = inForce(known, at);
  limits.set(known.filter((l) => l.from > at).concat(current === undefined ? [] : [current]));
}

const world = coProcessWorld({ onLeft: holdOrder, onRight: changeLimit, onTimer: check }, { state, timers });
export const onLeft = world.onLeft;
export const onRight = world.onRight;
export const onTimer = world.onTimer;
export const coProcessBatch = world.coProcessBatch;
