"""Tests of card-declines (`python3 -m unittest`, with the SDK on
PYTHONPATH): those of the Rust example."""

import unittest

import mailer_plugin as mp
from app import flag_declines, forget


def payment(card: str, status: str, at: int) -> mp.Record:
    return mp.Record(f'{{"card":"{card}","status":"{status}"}}', card, at)


class CardDeclinesTest(unittest.TestCase):
    def test_three_declines_within_a_minute_flag_the_card_once(self):
        h = mp.ProcessHarness(flag_declines, forget)
        self.assertEqual(h.send(payment("c1", "declined", 1_000)), [])
        self.assertEqual(h.send(payment("c1", "approved", 2_000)), [])
        self.assertEqual(h.send(payment("c1", "declined", 30_000)), [])
        alert = h.send(payment("c1", "declined", 60_000))
        self.assertEqual(alert, [mp.Record(b'{"card":"c1","declines":3,"first":1000,"last":60000}', b"c1", 60_000)])
        self.assertEqual(h.send(payment("c1", "declined", 61_000)), [])

    def test_declines_a_minute_apart_do_not_add_up(self):
        h = mp.ProcessHarness(flag_declines, forget)
        for at in [0, 40_000]:
            h.send(payment("c2", "declined", at))
        h.advance_watermark(60_000)
        self.assertEqual(h.send(payment("c2", "declined", 70_000)), [])
        self.assertEqual(len(h.timers("c2")), 2)
        self.assertEqual(h.list("c2", "declines"), [40_000, 70_000])

    def test_timers_unflag_a_card_so_a_new_burst_alerts_again(self):
        h = mp.ProcessHarness(flag_declines, forget)
        for at in [0, 1, 2]:
            h.send(payment("c3", "declined", at))
        self.assertEqual(h.value("c3", "flagged"), True)
        h.advance_watermark(200_000)
        self.assertIsNone(h.value("c3", "flagged"))
        for at in [300_000, 300_001]:
            self.assertEqual(h.send(payment("c3", "declined", at)), [])
        self.assertEqual(len(h.send(payment("c3", "declined", 300_002))), 1)

    def test_a_payment_that_is_not_json_is_an_error(self):
        h = mp.ProcessHarness(flag_declines, forget)
        with self.assertRaises(ValueError):
            h.send(mp.Record(b"nope", b"c1"))


if __name__ == "__main__":
    unittest.main()
