"""Co-process (Python): the spend-limits example (plugins/examples/spend-limits)
in Python. Left input: orders keyed by customer, held in list state `orders`
until the watermark reaches their time; right input: limit changes, kept
in list state `limits`. When an order's timer fires, it is checked against
the newest limit at or before its time; an order above it leaves as an
alert `{"amount", "customer", "limit", "order"}`."""

import json

import mailer_plugin as mp


def number(doc, field: str):
    """The number at `field` of a JSON object, or None."""
    v = doc.get(field) if isinstance(doc, dict) else None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def hold_order(rec: mp.Record, ctx: mp.Context) -> None:
    order = json.loads(rec.value)
    if number(order, "amount") is None:
        raise ValueError("an order needs a numeric `amount`")
    ctx.list("orders").append({"at": rec.timestamp, "order": order})
    ctx.timers.register_event_time(rec.timestamp)


def change_limit(rec: mp.Record, ctx: mp.Context) -> None:
    limit = number(json.loads(rec.value), "limit")
    if limit is None:
        raise ValueError("a limit change needs a numeric `limit`")
    ctx.list("limits").append({"from": rec.timestamp, "limit": float(limit)})


def in_force(limits: list, at: int):
    """The newest limit at or before `at` (the later one of equal times)."""
    best = None
    for limit in limits:
        if limit["from"] <= at and (best is None or limit["from"] >= best["from"]):
            best = limit
    return best


def check(timer: mp.Timer, ctx: mp.Context) -> None:
    orders, limits = ctx.list("orders"), ctx.list("limits")
    held, known = orders.get(), limits.get()
    customer = (timer.key or b"").decode(errors="replace")
    for h in (h for h in held if h["at"] <= timer.at):
        limit = in_force(known, h["at"])
        if limit is not None and h["order"]["amount"] > limit["limit"]:
            alert = {"order": h["order"].get("order"), "customer": customer, "amount": h["order"]["amount"], "limit": limit["limit"]}
            ctx.emit(timer.key, json.dumps(alert, separators=(",", ":"), sort_keys=True, ensure_ascii=False))
    orders.set([h for h in held if h["at"] > timer.at])
    current = in_force(known, timer.at)
    limits.set([l for l in known if l["from"] > timer.at] + ([current] if current else []))


WitWorld = mp.co_process_world(hold_order, change_limit, check)
