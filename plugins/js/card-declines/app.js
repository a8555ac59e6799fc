// Process (JavaScript): the Rust example plugins/examples/card-declines in
// JavaScript. Flags a card after 3 declined payments within 60 s of event
// time. The card's recent declines live in list state `declines` (their
// times) and whether it is flagged in value state `flagged`; an event-time
// timer per decline forgets it once 60 s of event time passed.
//
// Input: JSON payments keyed by card, e.g.
// `{"card":"c1","status":"declined","amount":12.5}`; output: one alert per
// burst, `{"card":"c1","declines":3,"first":…,"last":…}`.

import * as state from "mailer:plugin/state@0.1.0";
import * as timers from "mailer:plugin/timers@0.1.0";

/** How long a decline counts, ms of event time. */
const WINDOW_MS = 60000;
/** Declines within the window that flag a card. */
const THRESHOLD = 3;

/** Remembers each decline and flags the card at the third within 60 s. */
function flagDeclines(rec, ctx) {
  const payment = JSON.parse(new TextDecoder().decode(rec.value));
  const status = payment !== null && typeof payment === "object" ? payment.status : undefined;
  if (typeof status !== "string") throw new Error("a payment needs a string `status`");
  if (status !== "declined") return;
  const at = Number(rec.timestamp);
  const declines = ctx.list("declines");
  const flagged = ctx.value("flagged");
  declines.append(at);
  ctx.timers.registerEventTime(at + WINDOW_MS);
  const recent = declines.get().filter((t) => at - WINDOW_MS < t && t <= at);
  recent.sort((a, b) => a - b);
  if (recent.length >= THRESHOLD && !flagged.get()) {
    flagged.set(true);
    const card = new TextDecoder().decode(rec.key ?? new Uint8Array());
    const alert = { card, declines: recent.length, first: recent[0], last: recent[recent.length - 1] };
    ctx.emit(rec.key, JSON.stringify(alert));
  }
}

/** Forgets the declines older than 60 s; a card with fewer than 3 left may
 *  be flagged again. */
function forget(timer, ctx) {
  const declines = ctx.list("declines");
  const kept = declines.get().filter((t) => t + WINDOW_MS > Number(timer.at));
  if (kept.length < THRESHOLD) ctx.value("flagged").clear();
  declines.set(kept);
}

const world = processWorld({ onRecord: flagDeclines, onTimer: forget }, { state, timers });
export const onRecord = world.onRecord;
export const onTimer = world.onTimer;
export const processBatch = world.processBatch;
