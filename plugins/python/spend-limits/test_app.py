"""Tests of spend-limits (`python3 -m unittest`, with the SDK on
PYTHONPATH): those of the Rust example."""

import unittest

import mailer_plugin as mp
from app import change_limit, check, hold_order


def order(id: int, amount, at: int) -> mp.Record:
    return mp.Record(f'{{"order":{id},"amount":{amount}}}', "bob", at)


def limit(limit, at: int) -> mp.Record:
    return mp.Record(f'{{"limit":{limit}}}', "bob", at)


class SpendLimitsTest(unittest.TestCase):
    def harness(self) -> mp.ProcessHarness:
        return mp.ProcessHarness.co_process(hold_order, change_limit, check)

    def test_an_order_meets_the_limit_of_its_time_whichever_input_came_first(self):
        h = self.harness()
        h.send_right(limit(100.0, 0))
        self.assertEqual(h.send(order(1, 90, 500)), [])
        self.assertEqual(h.send(order(2, 90, 1_500)), [])
        # The change at 1 000 arrives after the order at 1 500.
        h.send_right(limit(50.0, 1_000))
        out = [r.value for r in h.advance_watermark(2_000)]
        self.assertEqual(out, [b'{"amount":90,"customer":"bob","limit":50.0,"order":2}'])

    def test_no_limit_no_alert_and_old_limits_are_dropped(self):
        h = self.harness()
        h.send(order(1, 1e9, 10))
        self.assertEqual(h.advance_watermark(10), [])
        h.send_right(limit(5.0, 20))
        h.send_right(limit(7.0, 30))
        h.send(order(2, 6.0, 40))
        self.assertEqual(h.advance_watermark(40), [])
        self.assertEqual(h.timers("bob"), [])
        self.assertEqual(h.list("bob", "limits"), [{"from": 30, "limit": 7.0}])
        h.send(order(3, 8.0, 50))
        self.assertEqual(len(h.advance_watermark(50)), 1)

    def test_malformed_input_is_an_error(self):
        h = self.harness()
        with self.assertRaisesRegex(ValueError, "numeric `amount`"):
            h.send(mp.Record(b'{"order":1}', "bob"))
        with self.assertRaisesRegex(ValueError, "numeric `limit`"):
            h.send_right(mp.Record(b"{}", "bob"))


if __name__ == "__main__":
    unittest.main()
