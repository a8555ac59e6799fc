"""Process (Python): counts each key's records in the host's keyed state
(value state `count`) and emits the running count."""

import mailer_plugin as mp


def count(rec: mp.Record, ctx: mp.Context) -> None:
    state = ctx.value("count")
    n = (state.get() or 0) + 1
    state.set(n)
    ctx.emit(rec.key, str(n))


WitWorld = mp.process_world(count)
