//! `GET /api/tap/{point}?limit=N&sample=N`: the records leaving a source or
//! an operator, streamed as JSON lines ([`crate::tap`]) as they pass.

use super::routes::{AdminState, error};
use crate::tap::{Subscription, TapError, record_line};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// How long the stream stays silent at most: then it says how many
/// records were dropped, or sends an empty line (which also finds a client
/// that went away).
const QUIET: Duration = Duration::from_secs(1);

/// What the client asked for.
struct TapQuery {
    /// Records to send before the stream ends.
    limit: Option<u64>,
    /// One record in this many.
    sample: u64,
}

/// Opens a tap and streams it until its limit, the client's going away or
/// the run's end.
pub async fn tap(
    State(state): State<AdminState>,
    Path(point): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let query = match parse_query(query.as_deref().unwrap_or_default()) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let subscription = match state.telemetry.taps.open(&point, query.sample) {
        Ok(s) => s,
        Err(e @ TapError::NoPoint { .. }) => return error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ (TapError::Stopped | TapError::TooMany)) => {
            return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
        }
    };
    let stream =
        futures_util::stream::unfold(Streaming::new(subscription, query.limit), |mut s| async move {
            let chunk = s.next_chunk().await?;
            Some((Ok::<_, std::convert::Infallible>(chunk), s))
        });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// `limit=N` (at least 1) and `sample=N` (one record in N, at least 1).
fn parse_query(query: &str) -> Result<TapQuery, String> {
    let mut q = TapQuery {
        limit: None,
        sample: 1,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || match value.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("`{name}` takes a whole number above 0, not `{value}`")),
        };
        match name {
            "limit" => q.limit = Some(number()?),
            "sample" => q.sample = number()?,
            _ => {
                return Err(format!(
                    "unknown parameter `{name}`: the tap takes `limit` and `sample`"
                ));
            }
        }
    }
    Ok(q)
}

/// A tap's stream between chunks.
struct Streaming {
    subscription: Subscription,
    /// Records left to send (none: no limit).
    left: Option<u64>,
    /// The dropped count the client was last told.
    told_dropped: u64,
    done: bool,
}

impl Streaming {
    fn new(subscription: Subscription, limit: Option<u64>) -> Self {
        Self {
            subscription,
            left: limit,
            told_dropped: 0,
            done: false,
        }
    }

    /// The next lines to send; `None` after the last.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        match tokio::time::timeout(QUIET, self.subscription.next()).await {
            Ok(Some(records)) => {
                for r in &records {
                    if self.left == Some(0) {
                        break;
                    }
                    push_line(&mut out, &record_line(r));
                    self.left = self.left.map(|n| n - 1);
                }
                self.tell_dropped(&mut out);
                if self.left == Some(0) {
                    self.end(&mut out, "the limit was reached");
                }
            }
            Ok(None) => {
                self.tell_dropped(&mut out);
                self.end(&mut out, "the pipeline has stopped");
            }
            Err(_quiet) => {
                self.tell_dropped(&mut out);
                if out.is_empty() {
                    out.push(b'\n');
                }
            }
        }
        Some(Bytes::from(out))
    }

    fn tell_dropped(&mut self, out: &mut Vec<u8>) {
        let dropped = self.subscription.dropped();
        if dropped != self.told_dropped {
            self.told_dropped = dropped;
            push_line(out, &serde_json::json!({ "dropped": dropped }));
        }
    }

    fn end(&mut self, out: &mut Vec<u8>, why: &str) {
        push_line(out, &serde_json::json!({ "end": why }));
        self.done = true;
    }
}

fn push_line(out: &mut Vec<u8>, line: &serde_json::Value) {
    serde_json::to_writer(&mut *out, line).expect("a JSON value serializes");
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_takes_a_limit_and_a_sample_and_names_what_is_wrong() {
        let q = parse_query("limit=5&sample=10").unwrap();
        assert_eq!((q.limit, q.sample), (Some(5), 10));
        let q = parse_query("").unwrap();
        assert_eq!((q.limit, q.sample), (None, 1));
        assert_eq!(
            parse_query("limit=0").err().unwrap(),
            "`limit` takes a whole number above 0, not `0`"
        );
        assert_eq!(
            parse_query("every=2").err().unwrap(),
            "unknown parameter `every`: the tap takes `limit` and `sample`"
        );
    }
}
