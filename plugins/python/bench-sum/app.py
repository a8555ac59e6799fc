"""Reduce (Python): the running sum of each key's values, as the Rust
plugin plugins/fixtures/bench-sum computes it. The accumulator, held by the
host per key, is the sum as decimal text."""

import mailer_plugin as mp


def running_sum(accumulator, rec: mp.Record) -> bytes:
    total = 0
    if accumulator is not None:
        total = mp.parse_i64(accumulator)
        if total is None:
            raise ValueError("the accumulator is not a 64-bit integer")
    total += rec.value_i64()
    if not mp.I64_MIN <= total <= mp.I64_MAX:
        raise ValueError("the sum overflows")
    return str(total).encode()


WitWorld = mp.reduce_world(running_sum)
