"""Aggregate (Python): the Rust plugin plugins/fixtures/bench-count-sum in
Python: the count and sum of a window's values (decimal integers); the
result is `{"count":n,"sum":s}`. The accumulator is the same JSON,
`{"count":n,"sum":s}`, so windows opened by either plugin finish in the
other."""

import mailer_plugin as mp


def wrapping(n: int) -> int:
    """`n` wrapped into the 64-bit range, as Rust's `wrapping_add` does."""
    return (n - mp.I64_MIN) % (1 << 64) + mp.I64_MIN


def create() -> dict:
    return {"count": 0, "sum": 0}


def add(acc: dict, rec: mp.Record) -> dict:
    return {"count": acc["count"] + 1, "sum": wrapping(acc["sum"] + rec.value_i64())}


def merge(acc: dict, later: dict) -> dict:
    return {"count": acc["count"] + later["count"], "sum": wrapping(acc["sum"] + later["sum"])}


def finish(acc: dict) -> bytes:
    return f'{{"count":{acc["count"]},"sum":{acc["sum"]}}}'.encode()


WitWorld = mp.aggregate_world(create, add, merge, finish)
