"""Window (Python): the Rust example plugins/examples/session-summary in
Python. Summarises one session of a user's clicks. Input: JSON clicks keyed
by user, e.g. `{"user":"u1","page":"/home","ts":…}`; output per session:
`{"clicks","end","exit","landing","pages","start","user"}`, with `pages`
the number of distinct pages and `landing` / `exit` the first and last page
in event time."""

import json

import mailer_plugin as mp


def page(click: mp.Record) -> str:
    doc = json.loads(click.value)
    p = doc.get("page") if isinstance(doc, dict) else None
    if not isinstance(p, str):
        raise ValueError("a click needs a string `page`")
    return p


def summarise(key, window: mp.Window, clicks: list, out: mp.Emit) -> None:
    """One summary per session window."""
    clicks = sorted(clicks, key=lambda c: c.timestamp)
    pages = [page(c) for c in clicks]
    summary = {
        "user": (key or b"").decode(errors="replace"),
        "start": window.start,
        "end": window.end,
        "clicks": len(clicks),
        "pages": len(set(pages)),
        "landing": pages[0] if pages else None,
        "exit": pages[-1] if pages else None,
    }
    out.emit(key, json.dumps(summary, separators=(",", ":"), sort_keys=True, ensure_ascii=False))


WitWorld = mp.window_world(summarise)
