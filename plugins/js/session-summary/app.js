// Window (JavaScript): the Rust example plugins/examples/session-summary in
// JavaScript. Summarises one session of a user's clicks. Input: JSON clicks
// keyed by user, e.g. `{"user":"u1","page":"/home","ts":…}`; output per
// session: `{"clicks","end","exit","landing","pages","start","user"}`, with
// `pages` the number of distinct pages and `landing` / `exit` the first and
// last page in event time.

function page(click) {
  const doc = JSON.parse(new TextDecoder().decode(click.value));
  const p = doc !== null && typeof doc === "object" ? doc.page : undefined;
  if (typeof p !== "string") throw new Error("a click needs a string `page`");
  return p;
}

/** One summary per session window. */
function summarise(key, window, clicks, out) {
  const sorted = [...clicks].sort((a, b) => (a.timestamp < b.timestamp ? -1 : a.timestamp > b.timestamp ? 1 : 0));
  const pages = sorted.map(page);
  const summary = {
    clicks: sorted.length,
    end: Number(window.end),
    exit: pages.length > 0 ? pages[pages.length - 1] : null,
    landing: pages.length > 0 ? pages[0] : null,
    pages: new Set(pages).size,
    start: Number(window.start),
    user: new TextDecoder().decode(key ?? new Uint8Array()),
  };
  out.emit(key, JSON.stringify(summary));
}

const world = windowWorld(summarise);
export const window = world.window;
export const windowBatch = world.windowBatch;
