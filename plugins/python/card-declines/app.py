"""Process (Python): the Rust example plugins/examples/card-declines in
Python. Flags a card after 3 declined payments within 60 s of event time.
The card's recent declines live in list state `declines` (their times)
and whether it is flagged in value state `flagged`; an event-time timer
per decline forgets it once 60 s of event time passed.

Input: JSON payments keyed by card, e.g.
`{"card":"c1","status":"declined","amount":12.5}`; output: one alert per
burst, `{"card":"c1","declines":3,"first":…,"last":…}`."""

import json

import mailer_plugin as mp

# How long a decline counts, ms of event time.
WINDOW_MS = 60_000
# Declines within the window that flag a card.
THRESHOLD = 3


def flag_declines(rec: mp.Record, ctx: mp.Context) -> None:
    """Remembers each decline and flags the card at the third within 60 s."""
    payment = json.loads(rec.value)
    status = payment.get("status") if isinstance(payment, dict) else None
    if not isinstance(status, str):
        raise ValueError("a payment needs a string `status`")
    if status != "declined":
        return
    at = rec.timestamp
    declines, flagged = ctx.list("declines"), ctx.value("flagged")
    declines.append(at)
    ctx.timers.register_event_time(at + WINDOW_MS)
    recent = sorted(t for t in declines.get() if at - WINDOW_MS < t <= at)
    if len(recent) >= THRESHOLD and not flagged.get():
        flagged.set(True)
        card = (rec.key or b"").decode(errors="replace")
        alert = {"card": card, "declines": len(recent), "first": recent[0], "last": recent[-1]}
        ctx.emit(rec.key, json.dumps(alert, separators=(",", ":"), sort_keys=True, ensure_ascii=False))


def forget(timer: mp.Timer, ctx: mp.Context) -> None:
    """Forgets the declines older than 60 s; a card with fewer than 3 left
    may be flagged again."""
    declines = ctx.list("declines")
    kept = [t for t in declines.get() if t + WINDOW_MS > timer.at]
    if len(kept) < THRESHOLD:
        ctx.value("flagged").clear()
    declines.set(kept)


WitWorld = mp.process_world(flag_declines, forget)
