"""Tests of bench-count-sum (`python3 -m unittest`, with the SDK on
PYTHONPATH): those of the Rust plugin, and its accumulator's bytes."""

import unittest

import mailer_plugin as mp
import app


class CountSumTest(unittest.TestCase):
    def harness(self) -> mp.AggregateHarness:
        return mp.AggregateHarness(app.create, app.add, app.merge, app.finish)

    def test_counts_sums_and_merges(self):
        h = self.harness()
        a, b, ab = mp.Window(0, 10), mp.Window(5, 15), mp.Window(0, 15)
        h.add(mp.Record(b"5", b"k"), a)
        h.add(mp.Record(b"-2", b"k"), b)
        h.merge("k", [a, b], into=ab)
        self.assertEqual(h.fire("k", ab), mp.Record(b'{"count":2,"sum":3}', b"k", 14))
        with self.assertRaises(ValueError):
            h.add(mp.Record(b"x", b"k"), a)

    def test_the_accumulator_is_the_rust_plugins(self):
        world = app.WitWorld()
        self.assertEqual(world.create(), b'{"count":0,"sum":0}')
        self.assertEqual(world.merge(b'{"count":1,"sum":9223372036854775807}', b'{"count":1,"sum":1}'), b'{"count":2,"sum":-9223372036854775808}')


if __name__ == "__main__":
    unittest.main()
