"""Tests of uppercase (`python3 -m unittest`, with the SDK on PYTHONPATH)."""

import unittest

import mailer_plugin as mp
from app import uppercase


class UppercaseTest(unittest.TestCase):
    def test_upper_cases_the_value_and_keeps_the_rest(self):
        out = mp.MapHarness(uppercase).send(mp.Record(b"hi", b"k", 3))
        self.assertEqual(out, mp.Record(b"HI", b"k", 3))


if __name__ == "__main__":
    unittest.main()
