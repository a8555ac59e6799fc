"""Process (Python): counts each key's records in the host's keyed state
(value state `count`, decimal text) and emits the running count."""

import mailer_plugin as mp


def count(rec: mp.Record, state) -> list:
    n = int(state.get("count") or b"0") + 1
    state.set("count", str(n).encode())
    return [mp.Record(str(n).encode(), rec.key, rec.timestamp)]


WitWorld = mp.process_world(count)
