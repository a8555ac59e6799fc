"""Co-process (Python): the spend-limits example (plugins/examples/spend-limits)
in Python. Left input: orders keyed by customer, held in list state `orders`
until the watermark reaches their time; right input: limit changes, kept
in list state `limits`. When an order's timer fires, it is checked against
the newest limit at or before its time; an order above it leaves as an
alert `{"order", "customer", "amount", "limit"}`."""

import json

import mailer_plugin as mp


def hold_order(rec: mp.Record, state, timers) -> list:
    order = json.loads(rec.value)
    if not isinstance(order.get("amount"), (int, float)):
        raise ValueError("an order needs a numeric `amount`")
    state.list_append("orders", json.dumps({"at": rec.timestamp, "order": order}).encode())
    timers.register(timers.TimeDomain.EVENT_TIME, rec.timestamp)
    return []


def change_limit(rec: mp.Record, state, timers) -> list:
    limit = json.loads(rec.value).get("limit")
    if not isinstance(limit, (int, float)):
        raise ValueError("a limit change needs a numeric `limit`")
    state.list_append("limits", json.dumps({"from": rec.timestamp, "limit": limit}).encode())
    return []


def in_force(limits: list, at: int):
    """The newest limit at or before `at` (the later one of equal times)."""
    best = None
    for limit in limits:
        if limit["from"] <= at and (best is None or limit["from"] >= best["from"]):
            best = limit
    return best


def replace(state, name: str, items: list) -> None:
    state.clear(name)
    for item in items:
        state.list_append(name, json.dumps(item).encode())


def check(key, domain, at: int, state, timers) -> list:
    held = [json.loads(b) for b in state.list_get("orders")]
    limits = [json.loads(b) for b in state.list_get("limits")]
    out = []
    for h in (h for h in held if h["at"] <= at):
        limit = in_force(limits, h["at"])
        if limit is not None and h["order"]["amount"] > limit["limit"]:
            alert = {
                "order": h["order"].get("order"),
                "customer": bytes(key).decode(),
                "amount": h["order"]["amount"],
                "limit": float(limit["limit"]),
            }
            out.append(mp.Record(json.dumps(alert).encode(), key, at))
    replace(state, "orders", [h for h in held if h["at"] > at])
    current = in_force(limits, at)
    replace(state, "limits", [l for l in limits if l["from"] > at] + ([current] if current else []))
    return out


WitWorld = mp.co_process_world(hold_order, change_limit, check)
