"""Tests of session-summary (`python3 -m unittest`, with the SDK on
PYTHONPATH): those of the Rust example."""

import unittest

import mailer_plugin as mp
from app import summarise


def click(page: str, ts: int) -> mp.Record:
    return mp.Record(f'{{"page":"{page}"}}', timestamp=ts)


class SessionSummaryTest(unittest.TestCase):
    def test_summarises_in_event_time_order(self):
        clicks = [click("/b", 300), click("/a", 100), click("/b", 200)]
        out = mp.WindowHarness(summarise).fire("u1", mp.Window(100, 500), clicks)
        summary = b'{"clicks":3,"end":500,"exit":"/b","landing":"/a","pages":2,"start":100,"user":"u1"}'
        self.assertEqual(out, [mp.Record(summary, b"u1", 499)])

    def test_a_click_that_is_not_json_fails_the_window(self):
        with self.assertRaises(ValueError):
            mp.WindowHarness(summarise).fire(None, mp.Window(0, 1), [mp.Record(b"x")])


if __name__ == "__main__":
    unittest.main()
