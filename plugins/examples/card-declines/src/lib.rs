//! Process: flags a card after 3 declined payments within 60 s of event
//! time. The card's recent declines live in host-held list state; an
//! event-time timer per decline forgets it once 60 s of event time passed.
//!
//! Input: JSON payments keyed by card, e.g.
//! `{"card":"c1","status":"declined","amount":12.5}`; output: one alert per
//! burst, `{"card":"c1","declines":3,"first":…,"last":…}`.

use mailer_sdk::{Emit, ListState, Record, Result, Timer, Timers, ValueState, operator};
use serde::Deserialize;

/// How long a decline counts, ms of event time.
const WINDOW_MS: i64 = 60_000;
/// Declines within the window that flag a card.
const THRESHOLD: usize = 3;

#[derive(Deserialize)]
struct Payment {
    status: String,
}

/// Remembers each decline and flags the card at the third within 60 s.
#[operator(process, on_timer = forget)]
fn flag_declines(
    rec: Record,
    declines: &mut ListState<i64>,
    flagged: &mut ValueState<bool>,
    timers: &mut Timers,
    out: &mut Emit,
) -> Result<()> {
    let payment: Payment = serde_json::from_slice(&rec.value)?;
    if payment.status != "declined" {
        return Ok(());
    }
    let at = rec.timestamp;
    declines.append(&at)?;
    timers.register_event_time(at + WINDOW_MS);
    let mut recent: Vec<i64> = declines
        .get()?
        .into_iter()
        .filter(|t| (at - WINDOW_MS + 1..=at).contains(t))
        .collect();
    recent.sort_unstable();
    if recent.len() >= THRESHOLD && !flagged.get()?.unwrap_or(false) {
        flagged.set(&true)?;
        let card = String::from_utf8_lossy(rec.key().unwrap_or_default());
        let alert = serde_json::json!({
            "card": card,
            "declines": recent.len(),
            "first": recent[0],
            "last": recent[recent.len() - 1],
        });
        out.emit(rec.key(), alert.to_string())?;
    }
    Ok(())
}

/// Forgets the declines older than 60 s; a card with fewer than 3 left may
/// be flagged again.
#[operator(timer)]
fn forget(timer: Timer, declines: &mut ListState<i64>, flagged: &mut ValueState<bool>) -> Result<()> {
    let kept: Vec<i64> = declines
        .get()?
        .into_iter()
        .filter(|t| t + WINDOW_MS > timer.at)
        .collect();
    if kept.len() < THRESHOLD {
        flagged.clear();
    }
    if kept.is_empty() {
        declines.clear();
    } else {
        declines.set(&kept)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailer_sdk::testing::Harness;

    fn payment(card: &str, status: &str, at: i64) -> Record {
        Record::new(format!(r#"{{"card":"{card}","status":"{status}"}}"#))
            .with_key(card)
            .with_timestamp(at)
    }

    #[test]
    fn three_declines_within_a_minute_flag_the_card_once() {
        let mut h = Harness::new(flag_declines_operator());
        assert!(h.send(payment("c1", "declined", 1_000)).unwrap().is_empty());
        assert!(h.send(payment("c1", "approved", 2_000)).unwrap().is_empty());
        assert!(h.send(payment("c1", "declined", 30_000)).unwrap().is_empty());
        let alert = h.send(payment("c1", "declined", 60_000)).unwrap();
        assert_eq!(
            String::from_utf8(alert[0].value.clone()).unwrap(),
            r#"{"card":"c1","declines":3,"first":1000,"last":60000}"#
        );
        assert_eq!(alert[0].timestamp, 60_000);
        assert!(h.send(payment("c1", "declined", 61_000)).unwrap().is_empty());
    }

    #[test]
    fn declines_a_minute_apart_do_not_add_up() {
        let mut h = Harness::new(flag_declines_operator());
        for at in [0, 40_000] {
            h.send(payment("c2", "declined", at)).unwrap();
        }
        h.advance_watermark(60_000).unwrap();
        assert!(h.send(payment("c2", "declined", 70_000)).unwrap().is_empty());
        assert_eq!(h.timers(b"c2").len(), 2);
    }

    #[test]
    fn timers_unflag_a_card_so_a_new_burst_alerts_again() {
        let mut h = Harness::new(flag_declines_operator());
        for at in [0, 1, 2] {
            h.send(payment("c3", "declined", at)).unwrap();
        }
        h.advance_watermark(200_000).unwrap();
        assert_eq!(h.value(b"c3", "flagged"), None);
        for at in [300_000, 300_001] {
            assert!(h.send(payment("c3", "declined", at)).unwrap().is_empty());
        }
        assert_eq!(h.send(payment("c3", "declined", 300_002)).unwrap().len(), 1);
    }

    #[test]
    fn a_payment_that_is_not_json_is_an_error() {
        let mut h = Harness::new(flag_declines_operator());
        assert!(h.send(Record::new("nope").with_key("c1")).is_err());
    }
}
