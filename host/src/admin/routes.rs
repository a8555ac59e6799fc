//! The admin API's routes and its bearer-token check.

use super::swaps::{SwapError, Swaps};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use std::sync::Arc;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub token: Arc<str>,
    pub swaps: Arc<Swaps>,
}

/// The API: `GET /api/operators`, `POST /api/operators/{name}/swap` (the
/// component as `application/wasm`, or JSON `{"path": "…"}`), `POST
/// /api/operators/{name}/rollback`, `GET /api/swaps`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/operators", get(operators))
        .route("/api/operators/{name}/swap", post(swap))
        .route("/api/operators/{name}/rollback", post(rollback))
        .route("/api/swaps", get(history))
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .with_state(state)
}

/// Refuses a request without `Authorization: Bearer <token>` (401).
async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(t) if same(t.as_bytes(), state.token.as_bytes()) => next.run(request).await,
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            Json(
                serde_json::json!({ "error": "a valid `Authorization: Bearer <token>` header is required" }),
            ),
        )
            .into_response(),
    }
}

/// Compares in time independent of where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn operators(State(state): State<AppState>) -> impl IntoResponse {
    Json(state.swaps.operators())
}

async fn history(State(state): State<AppState>) -> impl IntoResponse {
    Json(state.swaps.history())
}

#[derive(Deserialize)]
struct FromPath {
    path: std::path::PathBuf,
}

async fn swap(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let wasm = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/wasm"));
    let bytes = if wasm {
        body.to_vec()
    } else {
        let from: FromPath = match serde_json::from_slice(&body) {
            Ok(f) => f,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("send the component as `application/wasm`, or JSON {{\"path\": \"…\"}}: {e}"),
                );
            }
        };
        match std::fs::read(&from.path) {
            Ok(b) => b,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("reading {}: {e}", from.path.display()),
                );
            }
        }
    };
    let swaps = state.swaps.clone();
    blocking(move || swaps.swap(&name, &bytes)).await
}

async fn rollback(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    let swaps = state.swaps.clone();
    blocking(move || swaps.rollback(&name)).await
}

/// Runs a swap off the server's thread (compiling takes a while).
async fn blocking(f: impl FnOnce() -> Result<super::SwapRecord, SwapError> + Send + 'static) -> Response {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(record)) => (StatusCode::ACCEPTED, Json(record)).into_response(),
        Ok(Err(e @ SwapError::NoOperator(_))) => error(StatusCode::NOT_FOUND, e.to_string()),
        Ok(Err(e)) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}
