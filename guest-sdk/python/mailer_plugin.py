"""mailer plugins in Python, built into components by componentize-py.

A plugin module writes its functions and makes the class componentize-py
exports, `WitWorld`, with the helper of its world:

    import mailer_plugin as mp

    def shout(rec: mp.Record) -> mp.Record:
        rec.value = rec.value.upper()
        return rec

    WitWorld = mp.map_world(shout)

| helper | the functions it takes |
|---|---|
| `map_world(fn)` | `fn(rec) -> Record` |
| `filter_world(fn)` | `fn(rec) -> bool` (True keeps the record) |
| `flat_map_world(fn)` | `fn(rec) -> [Record]` |
| `reduce_world(fn)` | `fn(accumulator, rec) -> bytes`: the key's accumulator (None for its first record) in, the new one out |
| `process_world(on_record, on_timer=None)` | `on_record(rec, ctx)` and `on_timer(timer, ctx)`; `ctx` (a `Context`) holds the key's state and timers and takes the records to emit |
| `co_process_world(on_left, on_right, on_timer=None)` | as `process_world`, a function per input; both share the key's state and timers |
| `join_world(fn)` | `fn(left, right) -> [Record]` (one side None for a record without a partner) |
| `window_world(fn)` | `fn(key, window, records, out)`: a window's key, bounds and records in arrival order; its results go to `out` (an `Emit`) |
| `aggregate_world(create, add, merge, finish)` | `create() -> acc`, `add(acc, rec) -> acc`, `merge(acc, later) -> acc`, `finish(acc) -> bytes`; accumulators are JSON values |

The host calls each world's batch export with many records in the flat
encoding of docs/wire-format.md, which this module reads and writes. A
function that raises fails that record (or window) only: the operator's
`on_error` decides what happens to it.

Keyed state and aggregate accumulators are stored as compact JSON, as the
Rust SDK stores them, so a plugin in another language (or a later version
of this one) reads them back.

Each world has a harness (`ProcessHarness`, `ReduceHarness`,
`WindowHarness`, `AggregateHarness`, ...) that runs its functions in plain
Python as the host would, with in-memory state and a fake clock: a plugin is
tested with `python3 -m unittest`, without a host.
"""

import copy
from dataclasses import dataclass, field
import enum
import importlib
import json
import struct
from typing import Any, Callable, List, Optional, Tuple

try:  # inside a component, while componentize-py initializes the plugin
    from componentize_py_types import Err as _Err
    from wit_world.imports import types as _types
except ImportError:  # plain Python: tests and the harnesses
    _Err = _types = None

__all__ = [
    "Record",
    "parse_i64",
    "I64_MIN",
    "I64_MAX",
    "TimeDomain",
    "Timer",
    "Timers",
    "ValueState",
    "ListState",
    "MapState",
    "Emit",
    "Context",
    "Window",
    "decode_batch",
    "encode_outcomes",
    "map_world",
    "filter_world",
    "flat_map_world",
    "reduce_world",
    "process_world",
    "co_process_world",
    "join_world",
    "window_world",
    "aggregate_world",
    "MapHarness",
    "FilterHarness",
    "FlatMapHarness",
    "ReduceHarness",
    "ProcessHarness",
    "JoinHarness",
    "WindowHarness",
    "AggregateHarness",
]

# The range of the host's 64-bit integers (event times, the watermark).
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1
# Records one call may emit at most.
MAX_EMITTED = 1_000_000


def _bytes(what: str, v) -> bytes:
    """`v` as bytes: bytes as they are, text as UTF-8."""
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"{what} must be bytes or str, not {type(v).__name__}")


def parse_i64(b: bytes) -> Optional[int]:
    """ASCII decimal digits with an optional leading `-` or `+` as an int;
    None when empty, not all digits, or outside the 64-bit range (as the
    Rust SDK's `parse_i64` reads)."""
    digits = b[1:] if b[:1] in (b"-", b"+") else b
    if not digits or not digits.isdigit():
        return None
    n = -int(digits) if b[:1] == b"-" else int(digits)
    return n if I64_MIN <= n <= I64_MAX else None


@dataclass
class Record:
    """One record: value, key (None when absent), event time in ms, headers
    `[(name, value)]`. Text given for the value or key is kept as UTF-8."""

    value: bytes
    key: Optional[bytes] = None
    timestamp: int = 0
    headers: List[Tuple[str, bytes]] = field(default_factory=list)

    def __post_init__(self):
        if type(self.value) is not bytes:
            self.value = _bytes("a record's value", self.value)
        if self.key is not None and type(self.key) is not bytes:
            self.key = _bytes("a record's key", self.key)

    def value_str(self) -> str:
        """The value as UTF-8 text, or an error naming the problem."""
        try:
            return self.value.decode()
        except UnicodeDecodeError as e:
            raise ValueError(f"value is not UTF-8: {e}") from None

    def value_i64(self) -> int:
        """The value as a decimal integer (ASCII digits with an optional
        sign) within the 64-bit range, or an error naming the value."""
        n = parse_i64(self.value)
        if n is None:
            text = json.dumps(self.value.decode(errors="replace"), ensure_ascii=False)
            raise ValueError(f"value {text} is not a 64-bit integer")
        return n

    def header(self, name: str) -> Optional[bytes]:
        """The value of the first header called `name`."""
        return next((v for n, v in self.headers if n == name), None)


def _fields(rec) -> tuple:
    """`rec` as the host takes it, `(key, value, timestamp, headers)`, or
    an error naming what is wrong (a field may have been set to text, or
    to something else, after the record was made)."""
    if not isinstance(rec, Record):
        raise TypeError(f"expected a mailer_plugin.Record, not {type(rec).__name__}")
    key, value, timestamp, headers = rec.key, rec.value, rec.timestamp, rec.headers
    if type(value) is not bytes:
        value = _bytes("a record's value", value)
    if key is not None and type(key) is not bytes:
        key = _bytes("a record's key", key)
    if not isinstance(timestamp, int):
        raise TypeError(f"a record's timestamp must be an int (ms), not {type(timestamp).__name__}")
    if headers:
        for name, _ in headers:
            if not isinstance(name, str):
                raise TypeError(f"a header's name must be str, not {type(name).__name__}")
        headers = [(n, _bytes("a header's value", v)) for n, v in headers]
    return key, value, timestamp, headers


def _record_list(records) -> list:
    if not isinstance(records, (list, tuple)):
        raise TypeError(f"expected a list of records, not {type(records).__name__}")
    return records


def _kept(keep) -> bool:
    if not isinstance(keep, bool):
        raise TypeError(f"a filter function returns True or False, not {type(keep).__name__}")
    return keep


def _message(e: BaseException) -> str:
    return str(e) or type(e).__name__


# The flat encoding of docs/wire-format.md.

_MALFORMED = "mailer host sent a malformed batch"
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")


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

    def _unpack(self, fmt: struct.Struct) -> int:
        if self.at + fmt.size > len(self.buf):
            raise ValueError(f"batch truncated at byte {self.at}")
        (v,) = fmt.unpack_from(self.buf, self.at)
        self.at += fmt.size
        return v

    def u32(self) -> int:
        return self._unpack(_U32)

    def i64(self) -> int:
        return self._unpack(_I64)

    def bytes(self) -> bytes:
        return self.take(self.u32())

    def option(self) -> Optional[bytes]:
        """`0:u8` (None) or `1:u8 bytes`."""
        return self.bytes() if self.u8() else None

    def record(self) -> Record:
        flags = self.u8()
        key = self.bytes() if flags & 1 else None
        value = self.bytes()
        timestamp = self.i64()
        headers = [(self.bytes().decode(), self.bytes()) for _ in range(self.u32())]
        return Record(value=value, key=key, timestamp=timestamp, headers=headers)

    def maybe_record(self) -> Optional[Record]:
        """`0:u8` (None) or `1:u8 record`."""
        return self.record() if self.u8() else None

    def batch(self) -> List[Record]:
        return [self.record() for _ in range(self.u32())]

    def end(self) -> None:
        if self.at != len(self.buf):
            raise ValueError(f"{_MALFORMED}: {len(self.buf) - self.at} bytes after its end")


def decode_batch(buf: bytes) -> List[Record]:
    """The records of a batch (`count:u32 record*`)."""
    r = _Reader(buf)
    records = r.batch()
    r.end()
    return records


def _put_bytes(out: bytearray, b: bytes) -> None:
    out += _U32.pack(len(b))
    out += b


def _put_record(out: bytearray, rec) -> None:
    key, value, timestamp, headers = _fields(rec)
    if key is None:
        out.append(0)
    else:
        out.append(1)
        _put_bytes(out, key)
    _put_bytes(out, value)
    out += _I64.pack(timestamp)
    out += _U32.pack(len(headers))
    for name, v in headers:
        _put_bytes(out, name.encode())
        _put_bytes(out, v)


def _put_records(out: bytearray, records) -> None:
    """`count:u32 record*`: a batch, and a flat-map style outcome."""
    records = _record_list(records)
    out += _U32.pack(len(records))
    for rec in records:
        _put_record(out, rec)


def _put_kept(out: bytearray, keep) -> None:
    out.append(1 if _kept(keep) else 0)


def _put_value(out: bytearray, value) -> None:
    _put_bytes(out, _bytes("an accumulator or result", value))


# How each world's batch export writes one successful outcome.
_PUT = {
    "map": _put_record,
    "filter": _put_kept,
    "flat_map": _put_records,
    "reduce": _put_value,
    "process": _put_records,
    "co_process": _put_records,
    "join": _put_records,
    "window": _put_records,
    "aggregate": _put_value,
}


def encode_outcomes(outcomes: list, kind: str) -> bytes:
    """The answer to a batch of world `kind` (`map`, `filter`, `flat_map`,
    `reduce`, `process`, `co_process`, `join`, `window`, `aggregate`): per
    input either an `Exception` (it failed) or its result: a `Record`
    (map), a bool (filter), bytes (reduce, aggregate) or a list of
    records (the others). A result that cannot be sent fails its input."""
    put = _PUT[kind]
    out = bytearray(_U32.pack(len(outcomes)))
    for o in outcomes:
        mark = len(out)
        if not isinstance(o, Exception):
            try:
                out.append(0)
                put(out, o)
                continue
            except Exception as e:
                del out[mark:]
                o = e
        out.append(1)
        _put_bytes(out, _message(o).encode())
    return bytes(out)


def _each(step: Callable, items) -> list:
    """`step(item)` per item, or the exception it raised."""
    outcomes = []
    for item in items:
        try:
            outcomes.append(step(item))
        except Exception as e:  # a failed record, not a failed plugin
            outcomes.append(e)
    return outcomes


def _wire(records: list) -> List[Record]:
    """`records` as the host receives them: encoded and decoded again."""
    out = bytearray()
    _put_records(out, records)
    return decode_batch(bytes(out))


# Keyed state and timers.


def _json(what: str, v) -> bytes:
    """`v` as compact JSON, as the Rust SDK (serde_json) writes it."""
    try:
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} is not JSON: {e}") from None


def _unjson(b: bytes, problem: str):
    try:
        return json.loads(b)
    except ValueError as e:
        raise ValueError(f"{problem}: {e}") from None


class ValueState:
    """One value per key (any JSON value), kept by the host."""

    def __init__(self, host, name: str):
        self._host = host
        self._name = name

    def get(self):
        """The key's value, or None when unset (or expired)."""
        b = self._host.get(self._name)
        return None if b is None else _unjson(b, f"state `{self._name}` holds a value of another type")

    def set(self, value) -> None:
        """Sets the key's value."""
        self._host.set(self._name, _json(f"the value of state `{self._name}`", value))

    def clear(self) -> None:
        """Removes the key's value."""
        self._host.clear(self._name)


class ListState:
    """A list per key (of JSON values), in the order of appends."""

    def __init__(self, host, name: str):
        self._host = host
        self._name = name

    def get(self) -> list:
        """The key's items, oldest first (expired ones left out)."""
        problem = f"state `{self._name}` holds a value of another type"
        return [_unjson(b, problem) for b in self._host.list_get(self._name)]

    def append(self, item) -> None:
        """Appends one item."""
        self._host.list_append(self._name, _json(f"an item of state `{self._name}`", item))

    def set(self, items) -> None:
        """Replaces the key's items."""
        self.clear()
        for item in items:
            self.append(item)

    def clear(self) -> None:
        """Removes every item."""
        self._host.clear(self._name)


class MapState:
    """A map per key (JSON keys and values); entries come back in the order
    of their keys' JSON text."""

    def __init__(self, host, name: str):
        self._host = host
        self._name = name

    def _key(self, key) -> bytes:
        return _json(f"a key of state `{self._name}`", key)

    def get(self, key):
        """The value at `key`, or None."""
        b = self._host.map_get(self._name, self._key(key))
        return None if b is None else _unjson(b, f"state `{self._name}` holds a value of another type")

    def insert(self, key, value) -> None:
        """Sets `key` to `value`."""
        self._host.map_set(self._name, self._key(key), _json(f"a value of state `{self._name}`", value))

    def remove(self, key) -> None:
        """Removes `key`."""
        self._host.map_remove(self._name, self._key(key))

    def entries(self) -> List[Tuple[Any, Any]]:
        """Every `(key, value)`."""
        problem = f"state `{self._name}` holds a value of another type"
        return [(_unjson(k, problem), _unjson(v, problem)) for k, v in self._host.map_entries(self._name)]

    def clear(self) -> None:
        """Removes every entry."""
        self._host.clear(self._name)


class TimeDomain(enum.Enum):
    """Which clock a timer follows."""

    EVENT_TIME = 0
    """Event time: the timer fires when the watermark passes it."""
    PROCESSING_TIME = 1
    """Processing time: the timer fires when the wall clock passes it."""


@dataclass(frozen=True)
class Timer:
    """A due timer, as an `on_timer` function receives it: the key it was
    registered for, its clock, its time (ms)."""

    key: Optional[bytes]
    domain: TimeDomain
    at: int


class Timers:
    """The current key's timers. Registering the same time twice gives one
    timer; each fires once; a deleted one never fires."""

    def __init__(self, host):
        self._host = host

    def _call(self, f: Callable, domain: TimeDomain, at: int) -> None:
        if not isinstance(at, int):
            raise TypeError(f"a timer's time must be an int (ms), not {type(at).__name__}")
        f(self._host.TimeDomain[domain.name], at)

    def register_event_time(self, at: int) -> None:
        """Fires once the watermark reaches `at` (ms)."""
        self._call(self._host.register, TimeDomain.EVENT_TIME, at)

    def delete_event_time(self, at: int) -> None:
        """Cancels the event-time timer at `at`."""
        self._call(self._host.delete, TimeDomain.EVENT_TIME, at)

    def register_processing_time(self, at: int) -> None:
        """Fires once the wall clock reaches `at` (ms since the Unix epoch)."""
        self._call(self._host.register, TimeDomain.PROCESSING_TIME, at)

    def delete_processing_time(self, at: int) -> None:
        """Cancels the processing-time timer at `at`."""
        self._call(self._host.delete, TimeDomain.PROCESSING_TIME, at)

    def watermark(self) -> int:
        """The current event-time watermark (the minimum 64-bit integer
        before the first)."""
        return self._host.watermark()

    def now(self) -> int:
        """The current processing time, ms since the Unix epoch."""
        return self._host.now()


class Emit:
    """Where a process, co-process or window function's records go.
    `emit(key, value)` gives a record the event time of the record or timer
    being handled (a window's last millisecond); `record(rec)` emits a
    whole record as it is. `records` holds what was emitted, in order."""

    def __init__(self, timestamp: int):
        self.timestamp = timestamp
        self.records: List[Record] = []

    def emit(self, key: Optional[bytes], value) -> None:
        """Emits `value` (bytes, or text as UTF-8) under `key`."""
        self.record(Record(value, key, self.timestamp))

    def record(self, rec: Record) -> None:
        """Emits a whole record as it is."""
        if len(self.records) >= MAX_EMITTED:
            raise ValueError(f"one call emitted more than {MAX_EMITTED} records")
        self.records.append(rec)


class Context(Emit):
    """What a process or co-process function gets with its record or timer:
    the key's state by name (`value`, `list`, `map`: kept by the host, so
    checkpointed and kept across an upgrade of the plugin), its `timers`,
    and `emit` / `record` for its output."""

    def __init__(self, state, timers, timestamp: int):
        super().__init__(timestamp)
        self._state = state
        self.timers = Timers(timers)

    def value(self, name: str) -> ValueState:
        """The key's value state `name`."""
        return ValueState(self._state, name)

    def list(self, name: str) -> ListState:
        """The key's list state `name`."""
        return ListState(self._state, name)

    def map(self, name: str) -> MapState:
        """The key's map state `name`."""
        return MapState(self._state, name)


def _no_result(result, what: str) -> None:
    if result is not None:
        raise TypeError(f"{what} emits its records through `emit` or `record` and returns None")


class _Keyed:
    """A process (or co-process) operator's timer function, with the host's
    state and timers its functions reach: the WIT imports, or a harness's
    stand-in."""

    def __init__(self, state, timers, on_timer: Optional[Callable]):
        self.state = state
        self.timers = timers
        self.on_timer = on_timer

    def call(self, fn: Callable, rec: Record) -> List[Record]:
        """`fn`'s records for `rec`, emitted at its event time."""
        ctx = Context(self.state, self.timers, rec.timestamp)
        _no_result(fn(rec, ctx), "a process function")
        return ctx.records

    def fire(self, timer: Timer) -> List[Record]:
        """The timer function's records for `timer`, emitted at its time."""
        if self.on_timer is None:
            return []
        ctx = Context(self.state, self.timers, timer.at)
        _no_result(self.on_timer(timer, ctx), "a timer function")
        return ctx.records

    def batch(self, fn: Callable, input: bytes) -> bytes:
        return encode_outcomes(_each(lambda rec: self.call(fn, rec), decode_batch(input)), "process")


@dataclass(frozen=True)
class Window:
    """A window: the records with `start <= timestamp < end` (ms)."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        """The window's last millisecond: the event time of its results."""
        return self.end - 1


def _window_call(fn: Callable, key: Optional[bytes], window: Window, records: List[Record]) -> List[Record]:
    out = Emit(window.max_timestamp())
    _no_result(fn(key, window, records, out), "a window function")
    return out.records


def _reduce_call(fn: Callable, acc: Optional[bytes], rec: Record) -> bytes:
    return _bytes("a reduce function's accumulator", fn(acc, rec))


def _reduce_batch(fn: Callable, input: bytes) -> bytes:
    """`reduce-in`: each key's accumulator once (a slot), then the records,
    each naming its slot; a slot keeps its accumulator after a failure."""
    r = _Reader(input)
    slots = [r.option() for _ in range(r.u32())]
    outcomes = []
    for _ in range(r.u32()):
        slot, rec = r.u32(), r.record()
        if slot >= len(slots):
            raise ValueError(f"{_MALFORMED}: slot {slot} of {len(slots)}")
        try:
            slots[slot] = _reduce_call(fn, slots[slot], rec)
            outcomes.append(slots[slot])
        except Exception as e:
            outcomes.append(e)
    r.end()
    return encode_outcomes(outcomes, "reduce")


def _join_batch(fn: Callable, input: bytes) -> bytes:
    r = _Reader(input)
    pairs = [(r.maybe_record(), r.maybe_record()) for _ in range(r.u32())]
    r.end()
    return encode_outcomes(_each(lambda pair: fn(*pair), pairs), "join")


def _window_batch(fn: Callable, input: bytes) -> bytes:
    r = _Reader(input)
    windows = [(r.option(), Window(r.i64(), r.i64()), r.batch()) for _ in range(r.u32())]
    r.end()
    return encode_outcomes(_each(lambda w: _window_call(fn, *w), windows), "window")


class _Aggregate:
    """An aggregate's functions over accumulators encoded as JSON, as the
    host keeps them."""

    def __init__(self, create: Callable, add: Callable, merge: Callable, finish: Callable):
        self._create = create
        self._add = add
        self._merge = merge
        self._finish = finish

    @staticmethod
    def _decode(acc: bytes):
        return _unjson(acc, "the accumulator does not decode")

    @staticmethod
    def _encode(acc, what: str) -> bytes:
        if acc is None:
            raise TypeError(f"an aggregate's `{what}` returns the accumulator, not None")
        return _json(f"the accumulator `{what}` returned", acc)

    def create(self) -> bytes:
        return self._encode(self._create(), "create")

    def add(self, acc: bytes, rec: Record) -> bytes:
        return self._encode(self._add(self._decode(acc), rec), "add")

    def merge(self, a: bytes, b: bytes) -> bytes:
        return self._encode(self._merge(self._decode(a), self._decode(b)), "merge")

    def finish(self, acc: bytes) -> bytes:
        return _bytes("an aggregate's result", self._finish(self._decode(acc)))

    def _add_group(self, acc: Optional[bytes], records: List[Record]) -> bytes:
        a = self._create() if acc is None else self._decode(acc)
        for rec in records:
            a = self._add(a, rec)
            if a is None:
                raise TypeError("an aggregate's `add` returns the accumulator, not None")
        return self._encode(a, "add")

    def add_batch(self, input: bytes) -> bytes:
        """`aggregate-in`: per (key, window) group its accumulator (None for a
        fresh one) and its records; per group the new accumulator out."""
        r = _Reader(input)
        groups = [(r.option(), r.batch()) for _ in range(r.u32())]
        r.end()
        return encode_outcomes(_each(lambda g: self._add_group(*g), groups), "aggregate")

    def finish_batch(self, input: bytes) -> bytes:
        r = _Reader(input)
        accumulators = [r.bytes() for _ in range(r.u32())]
        r.end()
        return encode_outcomes(_each(self.finish, accumulators), "aggregate")


# The worlds: the classes componentize-py exports.


def _wit_imports(world: str, *names: str) -> tuple:
    """The WIT import modules `names` of the component being built, imported
    now: componentize-py runs the plugin's module at build time, and a
    component has no files to import from once it runs. None each in plain
    Python (tests)."""
    if _types is None:
        return (None,) * len(names)
    try:
        return tuple(importlib.import_module(f"wit_world.imports.{n}") for n in names)
    except ImportError:
        raise ImportError(
            f"{world.replace('-', '_')}_world needs the `{world}` world, but this plugin "
            "is built for another: name it in the plugin's `world` file"
        ) from None


def _typed(call: Callable):
    """What `call` returns, or its exception as the export's `Err(error)`."""
    try:
        return call()
    except Exception as e:
        raise _Err(_types.Error(_message(e)))


def _from_wit(r) -> Optional[Record]:
    if r is None:
        return None
    return Record(
        value=bytes(r.value),
        key=None if r.key is None else bytes(r.key),
        timestamp=r.timestamp,
        headers=[(h.name, bytes(h.value)) for h in r.headers],
    )


def _to_wit(rec):
    key, value, timestamp, headers = _fields(rec)
    return _types.Record(key, value, timestamp, [_types.Header(n, v) for n, v in headers])


def _to_wit_list(records) -> list:
    return [_to_wit(r) for r in _record_list(records)]


def _timer(key: Optional[bytes], domain, at: int) -> Timer:
    return Timer(None if key is None else bytes(key), TimeDomain[domain.name], at)


def map_world(fn: Callable[[Record], Record]):
    """The class of a map plugin: `fn` returns one record per record."""

    class Map:
        def map(self, input):
            return _typed(lambda: _to_wit(fn(_from_wit(input))))

        def map_batch(self, input: bytes) -> bytes:
            return encode_outcomes(_each(fn, decode_batch(input)), "map")

    return Map


def filter_world(fn: Callable[[Record], bool]):
    """The class of a filter plugin: `fn` keeps (True) or drops a record."""

    class Filter:
        def filter(self, input):
            return _typed(lambda: _kept(fn(_from_wit(input))))

        def filter_batch(self, input: bytes) -> bytes:
            return encode_outcomes(_each(fn, decode_batch(input)), "filter")

    return Filter


def flat_map_world(fn: Callable[[Record], List[Record]]):
    """The class of a flat-map plugin: `fn` returns zero or more records."""

    class FlatMap:
        def flat_map(self, input):
            return _typed(lambda: _to_wit_list(fn(_from_wit(input))))

        def flat_map_batch(self, input: bytes) -> bytes:
            return encode_outcomes(_each(fn, decode_batch(input)), "flat_map")

    return FlatMap


def reduce_world(fn: Callable[[Optional[bytes], Record], bytes]):
    """The class of a reduce plugin: `fn(accumulator, rec)` folds a record
    into its key's accumulator (None for the key's first record) and
    returns the new one (bytes, or text as UTF-8). The host keeps one per
    key and emits the key and its new accumulator per record."""

    class Reduce:
        def reduce(self, accumulator, input):
            return _typed(lambda: _reduce_call(fn, accumulator, _from_wit(input)))

        def reduce_batch(self, input: bytes) -> bytes:
            return _reduce_batch(fn, input)

    return Reduce


def process_world(on_record: Callable[[Record, Context], None], on_timer: Optional[Callable[[Timer, Context], None]] = None):
    """The class of a keyed process plugin (after a `key_by`):
    `on_record(rec, ctx)` handles a record and `on_timer(timer, ctx)` a
    due timer of its key; each emits through `ctx` (see `Context`)."""
    state, timers = _wit_imports("process", "state", "timers")
    keyed = _Keyed(state, timers, on_timer)

    class Process:
        def on_record(self, input):
            return _typed(lambda: _to_wit_list(keyed.call(on_record, _from_wit(input))))

        def on_timer(self, key, domain, at):
            return _typed(lambda: _to_wit_list(keyed.fire(_timer(key, domain, at))))

        def process_batch(self, input: bytes) -> bytes:
            return keyed.batch(on_record, input)

    return Process


def co_process_world(
    on_left: Callable[[Record, Context], None],
    on_right: Callable[[Record, Context], None],
    on_timer: Optional[Callable[[Timer, Context], None]] = None,
):
    """The class of a keyed co-process plugin: `on_left(rec, ctx)` and
    `on_right(rec, ctx)` handle a record of the left and of the right
    input, `on_timer(timer, ctx)` a due timer; both inputs share the key's
    state and timers."""
    state, timers = _wit_imports("co-process", "state", "timers")
    keyed = _Keyed(state, timers, on_timer)

    class CoProcess:
        def on_left(self, input):
            return _typed(lambda: _to_wit_list(keyed.call(on_left, _from_wit(input))))

        def on_right(self, input):
            return _typed(lambda: _to_wit_list(keyed.call(on_right, _from_wit(input))))

        def on_timer(self, key, domain, at):
            return _typed(lambda: _to_wit_list(keyed.fire(_timer(key, domain, at))))

        def co_process_batch(self, input: bytes) -> bytes:
            # `input:u8` (0 left, 1 right), then the records of one key.
            return keyed.batch(on_left if input[0] == 0 else on_right, input[1:])

    return CoProcess


def join_world(fn: Callable[[Optional[Record], Optional[Record]], List[Record]]):
    """The class of a join plugin: `fn(left, right)` returns the records of
    a joined pair (for a stream-table join, the stream record and the table
    row); one side is None for a record without a partner that the join
    keeps."""

    class Join:
        def join(self, left, right):
            return _typed(lambda: _to_wit_list(fn(_from_wit(left), _from_wit(right))))

        def join_batch(self, input: bytes) -> bytes:
            return _join_batch(fn, input)

    return Join


def window_world(fn: Callable[[Optional[bytes], Window, List[Record], Emit], None]):
    """The class of a window plugin: `fn(key, window, records, out)` gets a
    window's key, bounds and records (in arrival order) when it fires and
    emits its results through `out`, at the window's last millisecond."""

    class WindowFunction:
        def window(self, key, bounds, input):
            records = [_from_wit(r) for r in input]
            return _typed(lambda: _to_wit_list(_window_call(fn, key, Window(bounds.start, bounds.end), records)))

        def window_batch(self, input: bytes) -> bytes:
            return _window_batch(fn, input)

    return WindowFunction


def aggregate_world(create: Callable[[], Any], add: Callable, merge: Callable, finish: Callable):
    """The class of an incremental window aggregate: the host keeps one
    accumulator per (key, window), stored as JSON. `create()` starts one,
    `add(acc, rec)` returns it grown by a record, `merge(acc, later)` joins
    two when session windows merge (`later`'s records came later), and
    `finish(acc)` gives the window's result value (bytes, or text as
    UTF-8), emitted under the key at the window's last millisecond."""
    agg = _Aggregate(create, add, merge, finish)

    class AggregateFunction:
        def create(self) -> bytes:
            return agg.create()

        def add(self, accumulator, input):
            return _typed(lambda: agg.add(accumulator, _from_wit(input)))

        def merge(self, a, b):
            return _typed(lambda: agg.merge(a, b))

        def finish(self, accumulator):
            return _typed(lambda: agg.finish(accumulator))

        def add_batch(self, input: bytes) -> bytes:
            return agg.add_batch(input)

        def finish_batch(self, input: bytes) -> bytes:
            return agg.finish_batch(input)

    return AggregateFunction


# The harnesses: each world's functions run as the host runs them, in plain
# Python. What they return went through the wire encoding, so it is what the
# host would receive.


class MapHarness:
    """Runs a map function as the host does."""

    def __init__(self, fn: Callable[[Record], Record]):
        self._fn = fn

    def send(self, rec: Record) -> Record:
        """The record `fn` makes of `rec`; its exception, if it fails."""
        return _wire([self._fn(rec)])[0]


class FilterHarness:
    """Runs a filter function as the host does."""

    def __init__(self, fn: Callable[[Record], bool]):
        self._fn = fn

    def send(self, rec: Record) -> bool:
        """Whether `fn` keeps `rec`; its exception, if it fails."""
        return _kept(self._fn(rec))


class FlatMapHarness:
    """Runs a flat-map function as the host does."""

    def __init__(self, fn: Callable[[Record], List[Record]]):
        self._fn = fn

    def send(self, rec: Record) -> List[Record]:
        """The records `fn` makes of `rec`; its exception, if it fails."""
        return _wire(self._fn(rec))


class JoinHarness:
    """Runs a join function as the host does."""

    def __init__(self, fn: Callable[[Optional[Record], Optional[Record]], List[Record]]):
        self._fn = fn

    def send(self, left: Optional[Record], right: Optional[Record]) -> List[Record]:
        """The records `fn` makes of a pair (one side None for a record
        without a partner); its exception, if it fails."""
        return _wire(self._fn(left, right))


class ReduceHarness:
    """Runs a reduce function as the host does: one accumulator per key, in
    memory. A record that fails leaves its key's accumulator as it was."""

    def __init__(self, fn: Callable[[Optional[bytes], Record], bytes]):
        self._fn = fn
        self._accumulators = {}

    def send(self, rec: Record) -> Record:
        """What the host emits for `rec`: its key and the key's new
        accumulator, at its event time. Raises what `fn` raises."""
        acc = _reduce_call(self._fn, self._accumulators.get(rec.key), rec)
        self._accumulators[rec.key] = acc
        return Record(acc, rec.key, rec.timestamp)

    def accumulator(self, key) -> Optional[bytes]:
        """The accumulator of `key` (bytes or text), None before its first
        record."""
        return self._accumulators.get(None if key is None else _bytes("a key", key))


class WindowHarness:
    """Runs a window function as the host does when a window fires."""

    def __init__(self, fn: Callable[[Optional[bytes], Window, List[Record], Emit], None]):
        self._fn = fn

    def fire(self, key, window: Window, records: List[Record]) -> List[Record]:
        """The records `fn` emits for the window of `key` holding `records`
        (in arrival order); raises what `fn` raises."""
        key = None if key is None else _bytes("a key", key)
        return _wire(_window_call(self._fn, key, window, list(records)))


class AggregateHarness:
    """Runs an aggregate as the host does: one accumulator per (key,
    window), kept encoded as JSON between calls."""

    def __init__(self, create: Callable, add: Callable, merge: Callable, finish: Callable):
        self._agg = _Aggregate(create, add, merge, finish)
        self._windows = {}

    def _take(self, key: Optional[bytes], window: Window) -> bytes:
        try:
            return self._windows.pop((key, window))
        except KeyError:
            raise KeyError(f"no accumulator for key {key!r} in {window}: add a record to it first") from None

    def add(self, rec: Record, window: Window) -> None:
        """Adds `rec` to its key's `window` (a fresh accumulator for the
        window's first record); raises what the aggregate raises."""
        acc = self._windows.get((rec.key, window))
        self._windows[(rec.key, window)] = self._agg.add(self._agg.create() if acc is None else acc, rec)

    def merge(self, key, windows: List[Window], into: Window) -> None:
        """Merges the accumulators of `key`'s `windows` (in order: each one's
        records came after the one before) into window `into`, as session
        windows merge."""
        key = None if key is None else _bytes("a key", key)
        acc = self._take(key, windows[0])
        for later in windows[1:]:
            acc = self._agg.merge(acc, self._take(key, later))
        self._windows[(key, into)] = acc

    def accumulator(self, key, window: Window):
        """The accumulator of `key`'s `window`, decoded; None if it has none."""
        acc = self._windows.get((None if key is None else _bytes("a key", key), window))
        return None if acc is None else json.loads(acc)

    def fire(self, key, window: Window) -> Record:
        """The window's result, as the host emits it: the key, the finished
        value, the window's last millisecond; the window is then gone."""
        key = None if key is None else _bytes("a key", key)
        value = self._agg.finish(self._take(key, window))
        return Record(value, key, window.max_timestamp())


class _FakeHost:
    """The in-memory stand-in for the host's `state` and `timers` imports,
    scoped to the key being handled."""

    TimeDomain = TimeDomain

    def __init__(self):
        self.values = {}  # (key, name) -> bytes
        self.lists = {}  # (key, name) -> [bytes]
        self.maps = {}  # (key, name) -> {key: bytes}
        self.pending = set()  # (domain, at, key or None)
        self.current_watermark = I64_MIN
        self.current_time = 0
        self.key: Optional[bytes] = None
        self.in_call = False

    def call(self, key: Optional[bytes], f: Callable) -> list:
        """Runs `f` with the state in scope for `key`; undoes its changes
        when it raises, as the host does."""
        saved = copy.deepcopy((self.values, self.lists, self.maps, self.pending))
        self.key, self.in_call = key, True
        try:
            return f()
        except BaseException:
            self.values, self.lists, self.maps, self.pending = saved
            raise
        finally:
            self.key, self.in_call = None, False

    def _scoped(self, name: str) -> tuple:
        if not self.in_call:
            raise RuntimeError(
                "keyed state and timers exist only while a process function runs: "
                "in tests, run it with mailer_plugin.ProcessHarness"
            )
        return (self.key or b"", name)

    # The `state` import.
    def get(self, name):
        return self.values.get(self._scoped(name))

    def set(self, name, value):
        self.values[self._scoped(name)] = bytes(value)

    def clear(self, name):
        s = self._scoped(name)
        for kind in (self.values, self.lists, self.maps):
            kind.pop(s, None)

    def list_get(self, name):
        return list(self.lists.get(self._scoped(name), []))

    def list_append(self, name, item):
        self.lists.setdefault(self._scoped(name), []).append(bytes(item))

    def map_get(self, name, key):
        return self.maps.get(self._scoped(name), {}).get(bytes(key))

    def map_set(self, name, key, value):
        self.maps.setdefault(self._scoped(name), {})[bytes(key)] = bytes(value)

    def map_remove(self, name, key):
        self.maps.get(self._scoped(name), {}).pop(bytes(key), None)

    def map_entries(self, name):
        return sorted(self.maps.get(self._scoped(name), {}).items())

    # The `timers` import.
    def register(self, domain, at):
        self._scoped("")
        self.pending.add((domain, at, self.key))

    def delete(self, domain, at):
        self._scoped("")
        self.pending.discard((domain, at, self.key))

    def watermark(self):
        self._scoped("")
        return self.current_watermark

    def now(self):
        self._scoped("")
        return self.current_time


def _timer_order(t: tuple) -> tuple:
    """(domain, at, key) in the order timers fire: by time, then key."""
    domain, at, key = t
    return (domain.value, at, key is not None, key or b"")


class ProcessHarness:
    """Runs a process (or co-process) operator's functions as the host does,
    like the Rust SDK's `mailer_sdk::testing::Harness`: each key's state in
    memory, a fake clock for timers (the watermark at the minimum 64-bit
    integer, processing time at 0, until advanced). A call that raises
    passes its exception on, its state changes undone. State lives until
    cleared (the host's `state_ttl` is not modelled)."""

    def __init__(self, on_record: Callable[[Record, Context], None], on_timer: Optional[Callable] = None):
        self._host = _FakeHost()
        self._keyed = _Keyed(self._host, self._host, on_timer)
        self._on_record = on_record
        self._on_right: Optional[Callable] = None

    @classmethod
    def co_process(cls, on_left: Callable, on_right: Callable, on_timer: Optional[Callable] = None) -> "ProcessHarness":
        """A harness of a co-process operator: `send` hands a record to its
        left input, `send_right` to its right one; both share each key's
        state and timers."""
        h = cls(on_left, on_timer)
        h._on_right = on_right
        return h

    def _call(self, fn: Callable, rec: Record) -> List[Record]:
        return _wire(self._host.call(rec.key, lambda: self._keyed.call(fn, rec)))

    def send(self, rec: Record) -> List[Record]:
        """Hands `rec` to the operator (a co-process's left input); the
        records it emitted."""
        return self._call(self._on_record, rec)

    def send_right(self, rec: Record) -> List[Record]:
        """Hands `rec` to a co-process operator's right input."""
        if self._on_right is None:
            raise TypeError("a process operator has one input: make the harness with ProcessHarness.co_process")
        return self._call(self._on_right, rec)

    def advance_watermark(self, to: int) -> List[Record]:
        """Moves the watermark to `to` and fires the event-time timers due,
        in time order; what they emitted."""
        self._host.current_watermark = max(self._host.current_watermark, to)
        return self._fire(TimeDomain.EVENT_TIME, to)

    def advance_processing_time(self, to: int) -> List[Record]:
        """Moves the processing-time clock to `to` and fires the
        processing-time timers due, in time order; what they emitted."""
        self._host.current_time = max(self._host.current_time, to)
        return self._fire(TimeDomain.PROCESSING_TIME, to)

    def _fire(self, domain: TimeDomain, upto: int) -> List[Record]:
        due = sorted((t for t in self._host.pending if t[0] is domain and t[1] <= upto), key=_timer_order)
        out = []
        for t in due:
            if t not in self._host.pending:
                continue  # deleted by a timer that fired before it
            self._host.pending.discard(t)
            timer = Timer(t[2], domain, t[1])
            out += self._host.call(timer.key, lambda: self._keyed.fire(timer))
        return _wire(out)

    def timers(self, key) -> List[Tuple[TimeDomain, int]]:
        """The pending timers of `key`, in time order."""
        key = _bytes("a key", key)
        mine = [t for t in self._host.pending if (t[2] or b"") == key]
        return [(d, at) for d, at, _ in sorted(mine, key=_timer_order)]

    def value(self, key, name: str):
        """The value state `name` of `key`, decoded; None when unset."""
        b = self._host.values.get((_bytes("a key", key), name))
        return None if b is None else json.loads(b)

    def list(self, key, name: str) -> list:
        """The items of list state `name` of `key`, decoded."""
        return [json.loads(b) for b in self._host.lists.get((_bytes("a key", key), name), [])]

    def map(self, key, name: str) -> List[Tuple[Any, Any]]:
        """The entries of map state `name` of `key`, decoded, in key order."""
        entries = sorted(self._host.maps.get((_bytes("a key", key), name), {}).items())
        return [(json.loads(k), json.loads(v)) for k, v in entries]
