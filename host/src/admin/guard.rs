//! What every admin response passes through: requests must name this
//! server in their `Host` header (so a page on another site, whose name a
//! DNS-rebinding attack points at loopback, cannot read the API, the
//! metrics or the dashboard), and every response tells browsers not to
//! guess content types, not to frame it, and to load nothing but its own
//! files.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The host name of a `Host` header value, without its port.
fn host_name(value: &str) -> String {
    let value = value.trim().to_ascii_lowercase();
    if value.starts_with('[') {
        // [v6]:port
        return value
            .split_once(']')
            .map_or(value.clone(), |(h, _)| format!("{h}]"));
    }
    value.split(':').next().unwrap_or_default().to_owned()
}

/// Refuses (421) a request whose `Host` is not one of `allowed`.
pub async fn check_host(State(allowed): State<Arc<[String]>>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(host_name);
    match host {
        Some(h) if allowed.contains(&h) => next.run(request).await,
        _ => (
            StatusCode::MISDIRECTED_REQUEST,
            axum::Json(serde_json::json!({
                "error": "this admin server answers only requests addressed to it (its listen address, localhost, or `[admin] allowed_hosts`)"
            })),
        )
            .into_response(),
    }
}

/// Adds `X-Content-Type-Options`, `Content-Security-Policy` and
/// `Referrer-Policy` to every response.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::allowed_hosts;

    #[test]
    fn host_names_are_compared_without_ports() {
        let allowed = allowed_hosts("127.0.0.1:9464".parse().unwrap(), &["Mailer.Internal".into()]);
        for ok in ["localhost:9464", "127.0.0.1", "[::1]:80", "mailer.internal:443"] {
            assert!(allowed.contains(&host_name(ok)), "{ok}");
        }
        for refused in [
            "evil.example:9464",
            "127.0.0.1.evil.example",
            "localhost.evil:9464",
        ] {
            assert!(!allowed.contains(&host_name(refused)), "{refused}");
        }
    }
}
