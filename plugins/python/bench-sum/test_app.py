"""Tests of bench-sum (`python3 -m unittest`, with the SDK on PYTHONPATH):
those of the Rust plugin."""

import unittest

import mailer_plugin as mp
from app import running_sum


class RunningSumTest(unittest.TestCase):
    def test_sums(self):
        h = mp.ReduceHarness(running_sum)
        self.assertEqual(h.send(mp.Record(b"5", b"k")).value, b"5")
        self.assertEqual(h.send(mp.Record(b"-7", b"k")).value, b"-2")
        with self.assertRaisesRegex(ValueError, "the accumulator is not a 64-bit integer"):
            running_sum(b"x", mp.Record(b"1"))

    def test_an_overflow_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "the sum overflows"):
            running_sum(str(mp.I64_MAX).encode(), mp.Record(b"1"))


if __name__ == "__main__":
    unittest.main()
