//! `GET /api/state/{operator}?key=K` and `?prefix=P&limit=N`: a keyed
//! operator's state in the running pipeline, read by its workers between
//! two batches ([`crate::state::StateQuery`]).

use super::routes::{AdminState, error};
use crate::state::{QueryOutcome, StateQuery, StateRequest, bytes_json};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a query waits for the workers: it travels behind the records
/// already in the stream.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// The keys a scan gives unless asked for another number.
const SCAN_LIMIT: usize = 100;

/// The most keys a scan gives: each worker holds that many while it reads.
const MAX_SCAN_LIMIT: usize = 10_000;

/// Asks the operator's workers and waits for all of their answers.
pub async fn state(
    State(state): State<AdminState>,
    Path(operator): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let request = match parse_request(query.as_deref().unwrap_or_default()) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let graph = state.telemetry.graph();
    // In cluster mode the process's tasks answer, however many it holds.
    let workers = match state.cluster {
        true => Some(usize::MAX),
        false => graph
            .stages
            .iter()
            .find(|s| s.operators.contains(&operator))
            .map(|s| s.workers),
    };
    let Some(workers) = workers else {
        let known: Vec<&str> = graph.operators.iter().map(|o| o.name.as_str()).collect();
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "no operator is named `{operator}`; the operators: {}",
                known.join(", ")
            ),
        );
    };
    let query = Arc::new(StateQuery::new(&operator, request));
    if !state.control.request_query(query.clone()) {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the pipeline's input has ended: its state can be read only while it runs".into(),
        );
    }
    let asked = Instant::now();
    let outcome = loop {
        if let Some(outcome) = query.outcome(workers) {
            break outcome;
        }
        if asked.elapsed() > ANSWER_WITHIN {
            return error(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "operator `{operator}` did not answer within {}s: the pipeline's input ended (its state can be read only while it runs), or the query waits behind a full stream",
                    ANSWER_WITHIN.as_secs()
                ),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    match outcome {
        // A cluster process without a task of the operator holds nothing.
        QueryOutcome::NotKeyed if state.cluster => error(
            StatusCode::NOT_FOUND,
            format!("no task of operator `{operator}` runs in this process"),
        ),
        QueryOutcome::NotKeyed => error(
            StatusCode::BAD_REQUEST,
            format!("operator `{operator}` keeps no keyed state"),
        ),
        QueryOutcome::Failed(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        QueryOutcome::Found(found) => match &query.request {
            StateRequest::Key(key) => match found.into_iter().next() {
                Some((_, shown)) => {
                    Json(json!({ "operator": operator, "key": bytes_json(key), "state": shown }))
                        .into_response()
                }
                None => error(
                    StatusCode::NOT_FOUND,
                    format!("key {} has no state in operator `{operator}`", bytes_json(key)),
                ),
            },
            StateRequest::Scan { .. } => {
                let keys: Vec<Value> = found
                    .into_iter()
                    .map(|(key, shown)| json!({ "key": bytes_json(&key), "state": shown }))
                    .collect();
                Json(json!({ "operator": operator, "keys": keys })).into_response()
            }
        },
    }
}

/// `key=K` or `key_hex=…` (a get), or `prefix=P` and `limit=N` (a scan;
/// both optional, the limit at most [`MAX_SCAN_LIMIT`]).
fn parse_request(query: &str) -> Result<StateRequest, String> {
    let (mut key, mut prefix, mut limit) = (None, None, SCAN_LIMIT);
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        match name.as_ref() {
            "key" => key = Some(value.into_owned().into_bytes()),
            "key_hex" => key = Some(hex::decode(value.as_bytes()).map_err(|e| format!("`key_hex`: {e}"))?),
            "prefix" => prefix = Some(value.into_owned().into_bytes()),
            "limit" => {
                limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_SCAN_LIMIT).contains(n))
                    .ok_or_else(|| {
                        format!("`limit` takes a whole number from 1 to {MAX_SCAN_LIMIT}, not `{value}`")
                    })?
            }
            other => {
                return Err(format!(
                    "unknown parameter `{other}`: ask with `key` (or `key_hex`), or `prefix` and `limit`"
                ));
            }
        }
    }
    match (key, prefix) {
        (Some(_), Some(_)) => Err("ask for a `key` or scan a `prefix`, not both".into()),
        (Some(key), None) => Ok(StateRequest::Key(key)),
        (None, prefix) => Ok(StateRequest::Scan {
            prefix: prefix.unwrap_or_default(),
            limit,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_a_key_or_a_scan() {
        assert_eq!(
            parse_request("key=user%201"),
            Ok(StateRequest::Key(b"user 1".to_vec()))
        );
        assert_eq!(
            parse_request("prefix=u&limit=5"),
            Ok(StateRequest::Scan {
                prefix: b"u".to_vec(),
                limit: 5
            })
        );
        assert_eq!(
            parse_request(""),
            Ok(StateRequest::Scan {
                prefix: Vec::new(),
                limit: SCAN_LIMIT
            })
        );
        assert!(parse_request("key=a&prefix=b").is_err());
        assert_eq!(
            parse_request("limit=x").unwrap_err(),
            "`limit` takes a whole number from 1 to 10000, not `x`"
        );
        assert!(parse_request("limit=10001").is_err());
        assert_eq!(
            parse_request("key_hex=ff00"),
            Ok(StateRequest::Key(vec![0xff, 0]))
        );
    }
}
