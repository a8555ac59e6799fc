"""mailer plugins in Python, built into components by componentize-py.

A plugin module defines its function and names the world it fills:

    import mailer_plugin as mp

    def shout(rec: mp.Record) -> mp.Record:
        rec.value = rec.value.upper()
        return rec

    WitWorld = mp.map_world(shout)

`map_world`, `filter_world`, `flat_map_world`, `process_world` and
`co_process_world` make the class componentize-py exports. The host calls each world's batch export
with many records in the flat encoding of docs/wire-format.md, which this
module reads and writes; a function raising an exception fails that record
(the operator's `on_error` decides what happens to it).
"""

from dataclasses import dataclass, field
import struct
from typing import Callable, List, Optional, Tuple

__all__ = [
    "Record",
    "decode_batch",
    "encode_outcomes",
    "map_world",
    "filter_world",
    "flat_map_world",
    "process_world",
    "co_process_world",
]


@dataclass
class Record:
    """One record: key (or None), value, event time in ms, headers."""

    value: bytes
    key: Optional[bytes] = None
    timestamp: int = 0
    headers: List[Tuple[str, bytes]] = field(default_factory=list)


class _Reader:
    def __init__(self, buf: bytes):
        self.buf = memoryview(buf)
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.buf):
            raise ValueError(f"batch truncated at byte {self.at}")
        out = bytes(self.buf[self.at : self.at + n])
        self.at += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def i64(self) -> int:
        return struct.unpack("<q", self.take(8))[0]

    def bytes(self) -> bytes:
        return self.take(self.u32())

    def record(self) -> Record:
        flags = self.u8()
        key = self.bytes() if flags & 1 else None
        value = self.bytes()
        timestamp = self.i64()
        headers = [(self.bytes().decode(), self.bytes()) for _ in range(self.u32())]
        return Record(value=value, key=key, timestamp=timestamp, headers=headers)


def decode_batch(buf: bytes) -> List[Record]:
    """The records of a batch (`count:u32 record*`)."""
    r = _Reader(buf)
    return [r.record() for _ in range(r.u32())]


def _put_bytes(out: bytearray, b: bytes) -> None:
    out += struct.pack("<I", len(b))
    out += b


def _put_record(out: bytearray, rec: Record) -> None:
    out.append(1 if rec.key is not None else 0)
    if rec.key is not None:
        _put_bytes(out, bytes(rec.key))
    _put_bytes(out, bytes(rec.value))
    out += struct.pack("<q", rec.timestamp)
    out += struct.pack("<I", len(rec.headers))
    for name, value in rec.headers:
        _put_bytes(out, name.encode())
        _put_bytes(out, bytes(value))


def encode_outcomes(outcomes: list, kind: str) -> bytes:
    """The answer to a batch: per input record either an `Exception` (a
    failed record) or its result: a `Record` (kind `map`), a bool
    (`filter`) or a list of records (`flat_map`, `process`)."""
    out = bytearray(struct.pack("<I", len(outcomes)))
    for o in outcomes:
        if isinstance(o, Exception):
            out.append(1)
            _put_bytes(out, (str(o) or type(o).__name__).encode())
            continue
        out.append(0)
        if kind == "map":
            _put_record(out, o)
        elif kind == "filter":
            out.append(1 if o else 0)
        else:
            out += struct.pack("<I", len(o))
            for rec in o:
                _put_record(out, rec)
    return bytes(out)


def _each(fn: Callable, records: List[Record]) -> list:
    outcomes = []
    for rec in records:
        try:
            outcomes.append(fn(rec))
        except Exception as e:  # a failed record, not a failed plugin
            outcomes.append(e)
    return outcomes


def _from_wit(r) -> Record:
    return Record(
        value=bytes(r.value),
        key=None if r.key is None else bytes(r.key),
        timestamp=r.timestamp,
        headers=[(h.name, bytes(h.value)) for h in r.headers],
    )


def _to_wit(rec: Record):
    from wit_world.imports import types

    headers = [types.Header(name, value) for name, value in rec.headers]
    return types.Record(rec.key, rec.value, rec.timestamp, headers)


def _typed(fn: Callable, convert: Callable):
    """A typed per-record export: the result, or `Err(error)`."""

    def export(self, input):
        return _or_err(lambda: convert(fn(_from_wit(input))))

    return export


def _or_err(call: Callable):
    """What `call` returns, or its exception as the export's `Err(error)`."""
    from componentize_py_types import Err
    from wit_world.imports import types

    try:
        return call()
    except Exception as e:
        raise Err(types.Error(str(e) or type(e).__name__))


def map_world(fn: Callable[[Record], Record]):
    """The class of a map plugin: `fn` returns one record per record."""

    class Map:
        map = _typed(fn, _to_wit)

        def map_batch(self, input: bytes) -> bytes:
            return encode_outcomes(_each(fn, decode_batch(input)), "map")

    return Map


def filter_world(fn: Callable[[Record], bool]):
    """The class of a filter plugin: `fn` keeps (True) or drops a record."""

    class Filter:
        filter = _typed(fn, bool)

        def filter_batch(self, input: bytes) -> bytes:
            return encode_outcomes(_each(fn, decode_batch(input)), "filter")

    return Filter


def flat_map_world(fn: Callable[[Record], List[Record]]):
    """The class of a flat-map plugin: `fn` returns zero or more records."""

    class FlatMap:
        flat_map = _typed(fn, lambda out: [_to_wit(r) for r in out])

        def flat_map_batch(self, input: bytes) -> bytes:
            return encode_outcomes(_each(fn, decode_batch(input)), "flat_map")

    return FlatMap


def process_world(fn: Callable[[Record, object], List[Record]]):
    """The class of a keyed process plugin: `fn(record, state)` returns the
    records to emit; `state` is the host's keyed state of the record's key
    (`state.get(name)`, `state.set(name, value)`, `state.clear(name)`, and
    the list and map kinds of `wit/plugin.wit`). Timers are not used."""

    # Imported here, while componentize-py initializes the app at build
    # time: a plugin has no filesystem to import from when it runs.
    from wit_world.imports import state

    def with_state(rec: Record) -> List[Record]:
        return fn(rec, state)

    class Process:
        on_record = _typed(with_state, lambda out: [_to_wit(r) for r in out])

        def on_timer(self, key, domain, at):
            return []

        def process_batch(self, input: bytes) -> bytes:
            return encode_outcomes(_each(with_state, decode_batch(input)), "process")

    return Process


def co_process_batch(on_left: Callable, on_right: Callable, input: bytes) -> bytes:
    """The answer to a co-process batch: `input:u8` (0 left, 1 right) then
    the records of one key of that input."""
    fn = on_left if input[0] == 0 else on_right
    return encode_outcomes(_each(fn, decode_batch(input[1:])), "process")


def co_process_world(
    on_left: Callable[[Record, object, object], List[Record]],
    on_right: Callable[[Record, object, object], List[Record]],
    on_timer: Optional[Callable[[bytes, object, int, object, object], List[Record]]] = None,
):
    """The class of a keyed co-process plugin: `on_left(record, state,
    timers)` and `on_right(record, state, timers)` return the records to
    emit for a record of the left and of the right input; `on_timer(key,
    domain, at, state, timers)` those of a due timer. Both inputs share the
    key's `state` (as in `process_world`) and `timers`
    (`timers.register(timers.TimeDomain.EVENT_TIME, at)`,
    `timers.watermark()`, ...; see `wit/plugin.wit`)."""

    from wit_world.imports import state, timers

    def left(rec: Record) -> List[Record]:
        return on_left(rec, state, timers)

    def right(rec: Record) -> List[Record]:
        return on_right(rec, state, timers)

    def records(out: List[Record]) -> list:
        return [_to_wit(r) for r in out]

    class CoProcess:
        on_left = _typed(left, records)
        on_right = _typed(right, records)

        def on_timer(self, key, domain, at):
            if on_timer is None:
                return []
            return _or_err(lambda: records(on_timer(key, domain, at, state, timers)))

        def co_process_batch(self, input: bytes) -> bytes:
            return co_process_batch(left, right, input)

    return CoProcess
