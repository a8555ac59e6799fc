//! Window: summarises one session of a user's clicks. Input: JSON clicks
//! keyed by user, e.g. `{"user":"u1","page":"/home","ts":…}`; output per
//! session: `{"user","start","end","clicks","pages","landing","exit"}`, with
//! `pages` the number of distinct pages and `landing` / `exit` the first and
//! last page in event time.

use mailer_sdk::{Emit, Record, Result, Window, operator};
use serde::Deserialize;
use std::collections::BTreeSet;

#[derive(Deserialize)]
struct Click {
    page: String,
}

/// One summary per session window.
#[operator(window)]
fn summarise(key: Option<&[u8]>, window: Window, mut clicks: Vec<Record>, out: &mut Emit) -> Result<()> {
    clicks.sort_by_key(|c| c.timestamp);
    let pages: Vec<String> = clicks
        .iter()
        .map(|c| Ok(serde_json::from_slice::<Click>(&c.value)?.page))
        .collect::<Result<_>>()?;
    let summary = serde_json::json!({
        "user": String::from_utf8_lossy(key.unwrap_or_default()),
        "start": window.start,
        "end": window.end,
        "clicks": clicks.len(),
        "pages": pages.iter().collect::<BTreeSet<_>>().len(),
        "landing": pages.first(),
        "exit": pages.last(),
    });
    out.emit(key, summary.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn click(page: &str, ts: i64) -> Record {
        Record::new(format!(r#"{{"page":"{page}"}}"#)).with_timestamp(ts)
    }

    #[test]
    fn summarises_in_event_time_order() {
        let mut out = Emit::at(0);
        let w = Window { start: 100, end: 500 };
        let clicks = vec![click("/b", 300), click("/a", 100), click("/b", 200)];
        summarise(Some(b"u1"), w, clicks, &mut out).unwrap();
        let out = out.into_records();
        assert_eq!(
            String::from_utf8(out[0].value.clone()).unwrap(),
            r#"{"clicks":3,"end":500,"exit":"/b","landing":"/a","pages":2,"start":100,"user":"u1"}"#
        );
        assert_eq!(out[0].timestamp, 0);
    }

    #[test]
    fn a_click_that_is_not_json_fails_the_window() {
        let mut out = Emit::at(0);
        let w = Window { start: 0, end: 1 };
        assert!(summarise(None, w, vec![Record::new("x")], &mut out).is_err());
    }
}
