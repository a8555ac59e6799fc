"""Map (Python): upper-cases the value of each record."""

import mailer_plugin as mp


def uppercase(rec: mp.Record) -> mp.Record:
    rec.value = rec.value.upper()
    return rec


WitWorld = mp.map_world(uppercase)
