"""Tests of mailer_plugin: the wire format against hand-made bytes, each
world's batch export, keyed state, timers and the harnesses (run with
`python3 -m unittest` in this folder)."""

import json
import struct
import unittest

import mailer_plugin as mp


def u32(n: int) -> bytes:
    return struct.pack("<I", n)


def i64(n: int) -> bytes:
    return struct.pack("<q", n)


def blob(b: bytes) -> bytes:
    return u32(len(b)) + b


def record_bytes(value: bytes, key=None, ts=7, headers=()):
    out = bytearray([1 if key is not None else 0])
    if key is not None:
        out += blob(key)
    out += blob(value) + i64(ts) + u32(len(headers))
    for name, v in headers:
        out += blob(name.encode()) + blob(v)
    return bytes(out)


def batch(*records: bytes) -> bytes:
    return u32(len(records)) + b"".join(records)


def failed(message: str) -> bytes:
    return b"\x01" + blob(message.encode())


class WireTest(unittest.TestCase):
    def test_decodes_records_with_and_without_key_and_headers(self):
        a, b = mp.decode_batch(batch(record_bytes(b"a"), record_bytes(b"b", b"k", 9, [("h", b"v")])))
        self.assertEqual((a.value, a.key, a.timestamp), (b"a", None, 7))
        self.assertEqual((b.value, b.key, b.timestamp, b.headers), (b"b", b"k", 9, [("h", b"v")]))
        self.assertEqual(b.header("h"), b"v")

    def test_a_truncated_or_overlong_batch_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "truncated"):
            mp.decode_batch(u32(1) + b"\x00\x05")
        with self.assertRaisesRegex(ValueError, "1 bytes after its end"):
            mp.decode_batch(batch(record_bytes(b"a")) + b"\x00")

    def test_encodes_map_outcomes_and_failures(self):
        out = mp.encode_outcomes([mp.Record(b"x", b"k", 3), ValueError("bad")], "map")
        self.assertEqual(out, u32(2) + b"\x00" + record_bytes(b"x", b"k", 3) + failed("bad"))

    def test_encodes_filter_flat_map_and_accumulator_outcomes(self):
        self.assertEqual(mp.encode_outcomes([True, False], "filter"), u32(2) + b"\x00\x01\x00\x00")
        out = mp.encode_outcomes([[mp.Record(b"a"), mp.Record(b"b")]], "flat_map")
        self.assertEqual(out, u32(1) + b"\x00" + batch(record_bytes(b"a", ts=0), record_bytes(b"b", ts=0)))
        self.assertEqual(mp.encode_outcomes([b"12"], "reduce"), u32(1) + b"\x00" + blob(b"12"))

    def test_text_is_sent_as_utf8_and_a_result_of_another_type_fails_its_record_alone(self):
        out = mp.encode_outcomes([mp.Record("é", "k"), 5, mp.Record(b"z")], "map")
        expected = u32(3) + b"\x00" + record_bytes("é".encode(), b"k", 0)
        expected += failed("expected a mailer_plugin.Record, not int") + b"\x00" + record_bytes(b"z", ts=0)
        self.assertEqual(out, expected)
        changed = mp.Record(b"b")
        changed.value = 3
        out = mp.encode_outcomes([[mp.Record(b"a"), changed]], "flat_map")
        self.assertEqual(out, u32(1) + failed("a record's value must be bytes or str, not int"))
        with self.assertRaisesRegex(TypeError, "a record's value must be bytes or str, not int"):
            mp.Record(3)

    def test_integers_parse_as_the_rust_sdk_parses_them(self):
        for text, n in [("0", 0), ("-0", 0), ("+7", 7), ("-42", -42), ("9223372036854775807", mp.I64_MAX), ("-9223372036854775808", mp.I64_MIN)]:
            self.assertEqual(mp.parse_i64(text.encode()), n, text)
        for text in ["", "-", "+", "1x", " 1", "9223372036854775808", "-9223372036854775809", "1.0", "١"]:
            self.assertIsNone(mp.parse_i64(text.encode()), text)
        with self.assertRaisesRegex(ValueError, 'value "x" is not a 64-bit integer'):
            mp.Record(b"x").value_i64()


def upper(rec):
    if not rec.value:
        raise ValueError("empty")
    return mp.Record(rec.value.upper(), rec.key, rec.timestamp)


class StatelessWorldsTest(unittest.TestCase):
    def test_the_map_batch_export_runs_the_function_per_record(self):
        world = mp.map_world(upper)()
        answer = world.map_batch(batch(record_bytes(b"hi", b"k"), record_bytes(b"")))
        self.assertEqual(answer, u32(2) + b"\x00" + record_bytes(b"HI", b"k") + failed("empty"))

    def test_the_join_batch_export_gets_each_pair_with_absent_sides(self):
        def pair(left, right):
            sides = [s.value if s else b"-" for s in (left, right)]
            return [mp.Record(b"+".join(sides), (left or right).key)]

        pairs = u32(3) + b"\x01" + record_bytes(b"a", b"k") + b"\x01" + record_bytes(b"b", b"k")
        pairs += b"\x01" + record_bytes(b"c", b"j") + b"\x00"
        pairs += b"\x00\x01" + record_bytes(b"d", b"i")
        out = mp.join_world(pair)().join_batch(pairs)
        expected = u32(3)
        for value, key in [(b"a+b", b"k"), (b"c+-", b"j"), (b"-+d", b"i")]:
            expected += b"\x00" + batch(record_bytes(value, key, 0))
        self.assertEqual(out, expected)

    def test_the_harnesses_return_what_the_host_receives(self):
        self.assertEqual(mp.MapHarness(upper).send(mp.Record(b"a", "k")), mp.Record(b"A", b"k", 0))
        with self.assertRaisesRegex(ValueError, "empty"):
            mp.MapHarness(upper).send(mp.Record(b""))
        self.assertTrue(mp.FilterHarness(lambda r: len(r.value) > 1).send(mp.Record(b"ab")))
        with self.assertRaisesRegex(TypeError, "returns True or False, not NoneType"):
            mp.FilterHarness(lambda r: None).send(mp.Record(b"a"))
        words = mp.FlatMapHarness(lambda r: [mp.Record(w) for w in r.value_str().split()]).send(mp.Record(b"a b"))
        self.assertEqual([w.value for w in words], [b"a", b"b"])
        joined = mp.JoinHarness(lambda left, right: [left]).send(mp.Record(b"l"), None)
        self.assertEqual(joined, [mp.Record(b"l")])


def count(acc, rec):
    if rec.value == b"x" and acc == b"2":
        raise ValueError("no third x")
    return str(int(acc or b"0") + 1)


class ReduceTest(unittest.TestCase):
    def test_the_batch_export_folds_each_slot_from_its_accumulator_and_keeps_it_after_a_failure(self):
        reduce_in = u32(2) + b"\x01" + blob(b"41") + b"\x00"
        reduce_in += u32(5) + b"".join(u32(slot) + record_bytes(v) for slot, v in [(0, b"x"), (1, b"x"), (1, b"x"), (1, b"x"), (0, b"y")])
        out = mp.reduce_world(count)().reduce_batch(reduce_in)
        ok = lambda acc: b"\x00" + blob(acc)
        self.assertEqual(out, u32(5) + ok(b"42") + ok(b"1") + ok(b"2") + failed("no third x") + ok(b"43"))

    def test_the_harness_keeps_an_accumulator_per_key(self):
        h = mp.ReduceHarness(count)
        self.assertEqual(h.send(mp.Record(b"x", b"a", 5)), mp.Record(b"1", b"a", 5))
        h.send(mp.Record(b"x", b"a"))
        h.send(mp.Record(b"x", b"b"))
        with self.assertRaisesRegex(ValueError, "no third x"):
            h.send(mp.Record(b"x", b"a"))
        self.assertEqual((h.accumulator("a"), h.accumulator(b"b"), h.accumulator("c")), (b"2", b"1", None))


def pages(key, window, records, out):
    out.emit(key, f"{window.start}..{window.end} " + ",".join(r.value_str() for r in records))


class WindowTest(unittest.TestCase):
    def test_each_window_gets_its_records_and_emits_at_its_end(self):
        window_in = u32(2)
        for key, start, values in [(b"k", 0, [b"a", b"b"]), (b"j", 10, [b"c"])]:
            window_in += b"\x01" + blob(key) + i64(start) + i64(start + 10)
            window_in += batch(*(record_bytes(v) for v in values))
        out = mp.window_world(pages)().window_batch(window_in)
        expected = u32(2) + b"\x00" + batch(record_bytes(b"0..10 a,b", b"k", 9))
        expected += b"\x00" + batch(record_bytes(b"10..20 c", b"j", 19))
        self.assertEqual(out, expected)

    def test_the_harness_fires_a_window_and_a_function_that_returns_records_is_told_to_emit(self):
        out = mp.WindowHarness(pages).fire("k", mp.Window(0, 5), [mp.Record(b"a")])
        self.assertEqual(out, [mp.Record(b"0..5 a", b"k", 4)])
        with self.assertRaisesRegex(TypeError, "emits its records through `emit` or `record`"):
            mp.WindowHarness(lambda k, w, rs, out: rs).fire("k", mp.Window(0, 5), [])


# The count and sum of a window's values, as the Rust SDK's doc example.
SUM = dict(
    create=lambda: {"count": 0, "sum": 0},
    add=lambda acc, rec: {"count": acc["count"] + 1, "sum": acc["sum"] + rec.value_i64()},
    merge=lambda a, b: {"count": a["count"] + b["count"], "sum": a["sum"] + b["sum"]},
    finish=lambda acc: str(acc["sum"]),
)


class AggregateTest(unittest.TestCase):
    def test_accumulators_are_compact_json_as_serde_writes_them(self):
        world = mp.aggregate_world(**SUM)()
        self.assertEqual(world.create(), b'{"count":0,"sum":0}')
        self.assertEqual(world.merge(b'{"count":1,"sum":2}', b'{"count":2,"sum":5}'), b'{"count":3,"sum":7}')

    def test_add_batch_folds_each_group_from_its_accumulator_and_reports_a_failed_group(self):
        groups = [(None, [b"1", b"2"]), (b'{"count":1,"sum":5}', [b"x", b"3"]), (b'{"count":2,"sum":7}', [])]
        add_in = u32(len(groups))
        for acc, values in groups:
            add_in += (b"\x00" if acc is None else b"\x01" + blob(acc)) + batch(*(record_bytes(v) for v in values))
        out = mp.aggregate_world(**SUM)().add_batch(add_in)
        expected = u32(3) + b"\x00" + blob(b'{"count":2,"sum":3}')
        expected += failed('value "x" is not a 64-bit integer') + b"\x00" + blob(b'{"count":2,"sum":7}')
        self.assertEqual(out, expected)

    def test_finish_batch_finishes_each_window_and_reports_one_that_does_not_decode(self):
        finish_in = u32(3) + blob(b'{"count":2,"sum":9}') + blob(b"not json") + blob(b'{"count":1,"sum":-4}')
        out = mp.aggregate_world(**SUM)().finish_batch(finish_in)
        first, last = u32(3) + b"\x00" + blob(b"9"), b"\x00" + blob(b"-4")
        self.assertEqual((out[: len(first)], out[-len(last) :]), (first, last))
        self.assertRegex(out[len(first) : -len(last)], b"^\x01.{4}the accumulator does not decode: Expecting value")

    def test_the_harness_adds_merges_and_fires_per_key_and_window(self):
        h = mp.AggregateHarness(**SUM)
        first, second, merged = mp.Window(0, 10), mp.Window(8, 20), mp.Window(0, 20)
        h.add(mp.Record(b"5", b"k"), first)
        h.add(mp.Record(b"-2", b"k"), second)
        h.add(mp.Record(b"100", b"j"), first)
        self.assertEqual(h.accumulator("k", first), {"count": 1, "sum": 5})
        h.merge("k", [first, second], into=merged)
        self.assertEqual(h.fire("k", merged), mp.Record(b"3", b"k", 19))
        self.assertEqual(h.fire("j", first), mp.Record(b"100", b"j", 9))
        with self.assertRaisesRegex(KeyError, "add a record to it first"):
            h.fire("k", merged)
        with self.assertRaisesRegex(TypeError, "`add` returns the accumulator, not None"):
            mp.AggregateHarness(**{**SUM, "add": lambda acc, rec: None}).add(mp.Record(b"1"), first)


def command(rec, ctx):
    """Registers and deletes timers as the record says (as the Rust
    fixture test-timers)."""
    for c in filter(None, (c.strip() for c in rec.value_str().split(";"))):
        verb, at = c.split(" ")
        actions = {
            "register": ctx.timers.register_event_time,
            "delete": ctx.timers.delete_event_time,
            "register-processing": ctx.timers.register_processing_time,
        }
        if verb not in actions:
            raise ValueError(f"unknown command `{verb}`")
        actions[verb](int(at))


def fired(timer, ctx):
    domain = "event" if timer.domain is mp.TimeDomain.EVENT_TIME else "processing"
    ctx.emit(timer.key, f"{(timer.key or b'').decode()} {domain} {timer.at} watermark={ctx.timers.watermark()}")


def values(records):
    return [r.value.decode() for r in records]


class ProcessTest(unittest.TestCase):
    def test_timers_fire_in_time_order_once_and_never_when_deleted(self):
        h = mp.ProcessHarness(command, fired)
        h.send(mp.Record("register 30; register 10; register 10; register 20", "a"))
        h.send(mp.Record("delete 20", "a"))
        h.send(mp.Record("register 5", "b"))
        h.send(mp.Record("delete 5", "b"))
        self.assertEqual(h.timers("a"), [(mp.TimeDomain.EVENT_TIME, 10), (mp.TimeDomain.EVENT_TIME, 30)])
        out = h.advance_watermark(100)
        self.assertEqual(values(out), ["a event 10 watermark=100", "a event 30 watermark=100"])
        self.assertEqual([r.timestamp for r in out], [10, 30])
        self.assertEqual(h.advance_watermark(200), [])

    def test_processing_time_timers_follow_the_fake_clock(self):
        h = mp.ProcessHarness(command, fired)
        h.send(mp.Record("register-processing 5000; register 7", "c"))
        self.assertEqual(h.advance_processing_time(4999), [])
        self.assertEqual(values(h.advance_processing_time(6000)), [f"c processing 5000 watermark={mp.I64_MIN}"])
        self.assertEqual(h.timers("c"), [(mp.TimeDomain.EVENT_TIME, 7)])

    def test_a_failed_record_changes_no_state_and_sets_no_timer(self):
        h = mp.ProcessHarness(command, fired)
        h.send(mp.Record("register 10", "a"))
        with self.assertRaisesRegex(ValueError, "unknown command `explode`"):
            h.send(mp.Record("register 20; explode 5", "a"))
        self.assertEqual(values(h.advance_watermark(mp.I64_MAX)), [f"a event 10 watermark={mp.I64_MAX}"])

    def test_each_key_has_its_own_value_list_and_map_state_stored_as_json(self):
        def remember(rec, ctx):
            seen = ctx.value("seen")
            seen.set((seen.get() or 0) + 1)
            ctx.list("values").append(rec.value_str())
            words = ctx.map("words")
            words.insert(rec.value_str(), (words.get(rec.value_str()) or 0) + 1)
            if rec.value == b"forget":
                words.remove("a")
                ctx.list("values").set(["x"])
            ctx.emit(rec.key, json.dumps(words.entries()))

        h = mp.ProcessHarness(remember)
        for key, value in [("k", "b"), ("k", "a"), ("j", "a"), ("k", "a")]:
            out = h.send(mp.Record(value, key, 3))
        self.assertEqual(out, [mp.Record(b'[["a", 2], ["b", 1]]', b"k", 3)])
        self.assertEqual((h.value("k", "seen"), h.value("j", "seen"), h.value("x", "seen")), (3, 1, None))
        self.assertEqual(h.list("k", "values"), ["b", "a", "a"])
        self.assertEqual(h.map("k", "words"), [("a", 2), ("b", 1)])
        h.send(mp.Record("forget", "k"))
        self.assertEqual((h.list("k", "values"), h.map("k", "words")), (["x"], [("b", 1), ("forget", 1)]))

    def test_state_of_another_type_and_values_that_are_not_json_are_errors(self):
        def store(rec, ctx):
            ctx.value("v").set(rec.value)

        with self.assertRaisesRegex(TypeError, "the value of state `v` is not JSON"):
            mp.ProcessHarness(store).send(mp.Record(b"x", "k"))

        def corrupt(rec, ctx):
            ctx._state.set("v", b"not json")
            ctx.value("v").get()

        with self.assertRaisesRegex(ValueError, "state `v` holds a value of another type"):
            mp.ProcessHarness(corrupt).send(mp.Record(b"x", "k"))

    def test_a_process_function_that_returns_records_is_told_to_emit(self):
        with self.assertRaisesRegex(TypeError, "emits its records through `emit` or `record` and returns None"):
            mp.ProcessHarness(lambda rec, ctx: [rec]).send(mp.Record(b"x", "k"))

    def test_a_co_process_shares_state_between_its_inputs(self):
        def left(rec, ctx):
            ctx.emit(rec.key, f"limit {ctx.value('limit').get()}")

        def right(rec, ctx):
            ctx.value("limit").set(rec.value_i64())

        h = mp.ProcessHarness.co_process(left, right)
        h.send_right(mp.Record(b"100", "bob"))
        self.assertEqual(values(h.send(mp.Record(b"order", "bob"))), ["limit 100"])
        with self.assertRaisesRegex(TypeError, "make the harness with ProcessHarness.co_process"):
            mp.ProcessHarness(left).send_right(mp.Record(b"x"))

    def test_the_co_process_batch_export_goes_to_its_inputs_function(self):
        def left(rec, ctx):
            ctx.emit(rec.key, "L")

        def right(rec, ctx):
            raise ValueError("no")

        world = mp.co_process_world(left, right)()
        records = batch(record_bytes(b"x", b"k", 4))
        self.assertEqual(world.co_process_batch(b"\x00" + records), u32(1) + b"\x00" + batch(record_bytes(b"L", b"k", 4)))
        self.assertEqual(world.co_process_batch(b"\x01" + records), u32(1) + failed("no"))

    def test_state_outside_a_call_is_an_error_that_names_the_harness(self):
        kept = []
        h = mp.ProcessHarness(lambda rec, ctx: kept.append(ctx))
        h.send(mp.Record(b"x", "k"))
        with self.assertRaisesRegex(RuntimeError, "ProcessHarness"):
            kept[0].value("v").get()


if __name__ == "__main__":
    unittest.main()
