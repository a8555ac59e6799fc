"""The wire format of mailer_plugin against hand-made bytes (run with
`python3 -m unittest` in this folder)."""

import struct
import unittest

import mailer_plugin as mp


def record_bytes(value: bytes, key=None, ts=7, headers=()):
    out = bytearray([1 if key is not None else 0])
    if key is not None:
        out += struct.pack("<I", len(key)) + key
    out += struct.pack("<I", len(value)) + value + struct.pack("<q", ts)
    out += struct.pack("<I", len(headers))
    for name, v in headers:
        out += struct.pack("<I", len(name)) + name.encode() + struct.pack("<I", len(v)) + v
    return bytes(out)


class WireTest(unittest.TestCase):
    def test_decodes_records_with_and_without_key_and_headers(self):
        batch = struct.pack("<I", 2) + record_bytes(b"a") + record_bytes(b"b", b"k", 9, [("h", b"v")])
        a, b = mp.decode_batch(batch)
        self.assertEqual((a.value, a.key, a.timestamp), (b"a", None, 7))
        self.assertEqual((b.value, b.key, b.timestamp, b.headers), (b"b", b"k", 9, [("h", b"v")]))

    def test_a_truncated_batch_is_an_error(self):
        with self.assertRaises(ValueError):
            mp.decode_batch(struct.pack("<I", 1) + b"\x00\x05")

    def test_encodes_map_outcomes_and_failures(self):
        out = mp.encode_outcomes([mp.Record(b"x", b"k", 3), ValueError("bad")], "map")
        expected = struct.pack("<I", 2) + b"\x00" + record_bytes(b"x", b"k", 3)
        expected += b"\x01" + struct.pack("<I", 3) + b"bad"
        self.assertEqual(out, expected)

    def test_encodes_filter_and_flat_map_outcomes(self):
        self.assertEqual(mp.encode_outcomes([True, False], "filter"), struct.pack("<I", 2) + b"\x00\x01\x00\x00")
        out = mp.encode_outcomes([[mp.Record(b"a"), mp.Record(b"b")]], "flat_map")
        self.assertEqual(out, struct.pack("<I", 1) + b"\x00" + struct.pack("<I", 2) + record_bytes(b"a", ts=0) + record_bytes(b"b", ts=0))

    def test_the_batch_export_runs_the_function_per_record(self):
        world = mp.map_world(lambda r: mp.Record(r.value.upper(), r.key, r.timestamp))()
        batch = struct.pack("<I", 1) + record_bytes(b"hi", b"k")
        self.assertEqual(world.map_batch(batch), struct.pack("<I", 1) + b"\x00" + record_bytes(b"HI", b"k"))

    def test_a_co_process_batch_goes_to_its_inputs_function(self):
        def left(r):
            return [mp.Record(b"L", r.key, r.timestamp)]

        def right(r):
            raise ValueError("no")

        batch = struct.pack("<I", 1) + record_bytes(b"x", b"k", 4)
        self.assertEqual(
            mp.co_process_batch(left, right, b"\x00" + batch),
            struct.pack("<I", 1) + b"\x00" + struct.pack("<I", 1) + record_bytes(b"L", b"k", 4),
        )
        self.assertEqual(
            mp.co_process_batch(left, right, b"\x01" + batch),
            struct.pack("<I", 1) + b"\x01" + struct.pack("<I", 2) + b"no",
        )


if __name__ == "__main__":
    unittest.main()
