//! Co-process: checks each order against its customer's spending limit as
//! it was at the order's time. Both inputs are keyed by customer and share
//! the customer's state:
//!
//! - left, orders: `{"order":7,"amount":120.5,…}` — held in list state
//!   until the watermark reaches the order's time (an event-time timer);
//! - right, limit changes: `{"limit":100,…}` — each kept with its time.
//!
//! When the timer fires, every limit change up to the order's time has
//! arrived (the watermark is the lower of both inputs'), so the order is
//! checked against the newest one at or before it, whatever order the two
//! inputs' records came in. An order above it leaves as an alert,
//! `{"order":7,"customer":"bob","amount":120.5,"limit":100}`; a customer
//! without a limit yet has none. Limit changes older than the one in force
//! at the watermark are dropped.

use mailer_sdk::{Emit, Error, ListState, Record, Result, Timer, Timers, operator};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// An order waiting for its time: when it was placed, and the order.
#[derive(Serialize, Deserialize)]
struct Held {
    at: i64,
    order: Value,
}

/// A limit in force from `from` on.
#[derive(Serialize, Deserialize, Clone, Copy)]
struct Limit {
    from: i64,
    limit: f64,
}

/// Holds an order until the watermark reaches its time.
#[operator(co_process, right = change_limit, on_timer = check)]
fn hold_order(rec: Record, orders: &mut ListState<Held>, timers: &mut Timers) -> Result<()> {
    let order: Value = serde_json::from_slice(&rec.value)?;
    if !order["amount"].is_number() {
        return Err(Error::new("an order needs a numeric `amount`"));
    }
    orders.append(&Held {
        at: rec.timestamp,
        order,
    })?;
    timers.register_event_time(rec.timestamp);
    Ok(())
}

/// Keeps a limit change with its time.
#[operator(right)]
fn change_limit(rec: Record, limits: &mut ListState<Limit>) -> Result<()> {
    let change: Value = serde_json::from_slice(&rec.value)?;
    let limit = change["limit"]
        .as_f64()
        .ok_or_else(|| Error::new("a limit change needs a numeric `limit`"))?;
    limits.append(&Limit {
        from: rec.timestamp,
        limit,
    })
}

/// The limit in force at `at`: the newest change at or before it (the
/// later one of equal times).
fn in_force(limits: &[Limit], at: i64) -> Option<Limit> {
    limits
        .iter()
        .enumerate()
        .filter(|(_, l)| l.from <= at)
        .max_by_key(|(i, l)| (l.from, *i))
        .map(|(_, l)| *l)
}

/// Checks the orders whose time came, and drops the limits no order to
/// come can need.
#[operator(timer)]
fn check(
    timer: Timer,
    orders: &mut ListState<Held>,
    limits: &mut ListState<Limit>,
    out: &mut Emit,
) -> Result<()> {
    let (due, waiting): (Vec<Held>, Vec<Held>) = orders.get()?.into_iter().partition(|h| h.at <= timer.at);
    let known = limits.get()?;
    let customer = String::from_utf8_lossy(timer.key().unwrap_or_default()).into_owned();
    for held in &due {
        let Some(limit) = in_force(&known, held.at) else {
            continue;
        };
        let amount = held.order["amount"].as_f64().unwrap_or_default();
        if amount > limit.limit {
            let alert = json!({
                "order": held.order["order"],
                "customer": customer,
                "amount": held.order["amount"],
                "limit": limit.limit,
            });
            out.emit(timer.key(), alert.to_string())?;
        }
    }
    orders.set(&waiting)?;
    let current = in_force(&known, timer.at);
    let kept: Vec<Limit> = known
        .iter()
        .copied()
        .filter(|l| l.from > timer.at)
        .chain(current)
        .collect();
    limits.set(&kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailer_sdk::testing::Harness;

    fn order(id: u32, amount: f64, at: i64) -> Record {
        Record::new(format!(r#"{{"order":{id},"amount":{amount}}}"#))
            .with_key("bob")
            .with_timestamp(at)
    }

    fn limit(limit: f64, at: i64) -> Record {
        Record::new(format!(r#"{{"limit":{limit}}}"#))
            .with_key("bob")
            .with_timestamp(at)
    }

    fn alerts(out: Vec<Record>) -> Vec<String> {
        out.into_iter()
            .map(|r| String::from_utf8(r.value).unwrap())
            .collect()
    }

    #[test]
    fn an_order_meets_the_limit_of_its_time_whichever_input_came_first() {
        let mut h = Harness::co_process(hold_order_operator());
        h.send_right(limit(100.0, 0)).unwrap();
        assert!(h.send(order(1, 90.0, 500)).unwrap().is_empty());
        assert!(h.send(order(2, 90.0, 1_500)).unwrap().is_empty());
        // The change at 1 000 arrives after the order at 1 500.
        h.send_right(limit(50.0, 1_000)).unwrap();
        let out = alerts(h.advance_watermark(2_000).unwrap());
        assert_eq!(out, [r#"{"amount":90,"customer":"bob","limit":50.0,"order":2}"#]);
    }

    #[test]
    fn no_limit_no_alert_and_old_limits_are_dropped() {
        let mut h = Harness::co_process(hold_order_operator());
        h.send(order(1, 1e9, 10)).unwrap();
        assert!(h.advance_watermark(10).unwrap().is_empty());
        h.send_right(limit(5.0, 20)).unwrap();
        h.send_right(limit(7.0, 30)).unwrap();
        h.send(order(2, 6.0, 40)).unwrap();
        assert!(h.advance_watermark(40).unwrap().is_empty());
        assert!(h.timers(b"bob").is_empty());
        h.send(order(3, 8.0, 50)).unwrap();
        assert_eq!(h.advance_watermark(50).unwrap().len(), 1);
    }

    #[test]
    fn malformed_input_is_an_error() {
        let mut h = Harness::co_process(hold_order_operator());
        assert!(h.send(Record::new(r#"{"order":1}"#).with_key("bob")).is_err());
        assert!(h.send_right(Record::new("{}").with_key("bob")).is_err());
    }
}
