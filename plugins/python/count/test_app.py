"""Tests of count (`python3 -m unittest`, with the SDK on PYTHONPATH)."""

import unittest

import mailer_plugin as mp
from app import count


class CountTest(unittest.TestCase):
    def test_counts_each_key_from_one(self):
        h = mp.ProcessHarness(count)
        for key, expected in [("a", b"1"), ("b", b"1"), ("a", b"2")]:
            self.assertEqual(h.send(mp.Record(b"x", key, 9)), [mp.Record(expected, key, 9)])
        self.assertEqual(h.value("a", "count"), 2)


if __name__ == "__main__":
    unittest.main()
