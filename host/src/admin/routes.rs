//! The admin server's routes and its bearer-token check.

use crate::metrics::{PluginInfo, Telemetry};
use crate::swap::{SwapError, Swaps};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::Arc;

/// What every handler shares.
#[derive(Clone)]
pub struct AdminState {
    /// The bearer token.
    pub token: Arc<str>,
    /// The plugin operators and their swaps.
    pub swaps: Arc<Swaps>,
    /// What the run measures.
    pub telemetry: Arc<Telemetry>,
    /// Whether `/metrics` and the dashboard are served.
    pub metrics: bool,
    /// Whether `/metrics` and the dashboard's data need the token too.
    pub metrics_need_token: bool,
    /// The largest component a swap may upload, in bytes.
    pub max_plugin_bytes: usize,
    /// The host names requests may address.
    pub allowed_hosts: Arc<[String]>,
    /// Where state queries go.
    pub control: crate::runtime::Control,
    /// Whether the process runs in cluster mode (its keyed state is its
    /// tasks').
    pub cluster: bool,
}

/// The API: `GET /api/pipelines`, `GET /api/operators`, `POST
/// /api/operators/{name}/swap` (the component's bytes as
/// `application/wasm`, at most `max_plugin_bytes`; `?force=true` takes a
/// lower state version), `POST /api/operators/{name}/rollback` (also
/// `?force=true`), `POST /api/operators/{name}/shadow`
/// (a component to run beside the current version, `?share=`), `POST
/// /api/operators/{name}/canary` (a component to handle a share of the key
/// groups, `?share=`), `POST
/// /api/operators/{name}/promote` and `…/abort` (end the shadow, swapping
/// it in or not), `GET /api/swaps`, `GET /api/swaps/{id}`, `GET /api/tasks` (a
/// cluster-mode process's tasks), `GET /api/tap/{point}` (the records
/// leaving a source or operator, see [`super::tap`]), `GET
/// /api/state/{operator}` (a keyed operator's state, see
/// [`super::state`]), all needing the token; `GET /metrics` (Prometheus text), `GET /` (the dashboard) and `GET
/// /dashboard/snapshot` (its data), needing it only when
/// `metrics_need_token`. Every request must address this server by name
/// (`Host`), and every response carries the headers of [`super::guard`].
pub fn router(state: AdminState) -> Router {
    let guard = middleware::from_fn_with_state(state.clone(), require_token);
    let host = middleware::from_fn_with_state(state.allowed_hosts.clone(), super::guard::check_host);
    let api = Router::new()
        .route("/api/pipelines", get(pipelines))
        .route("/api/operators", get(operators))
        .route(
            "/api/operators/{name}/swap",
            post(swap).layer(DefaultBodyLimit::max(state.max_plugin_bytes)),
        )
        .route(
            "/api/operators/{name}/shadow",
            post(shadow).layer(DefaultBodyLimit::max(state.max_plugin_bytes)),
        )
        .route(
            "/api/operators/{name}/canary",
            post(canary).layer(DefaultBodyLimit::max(state.max_plugin_bytes)),
        )
        .route("/api/operators/{name}/rollback", post(rollback))
        .route("/api/operators/{name}/promote", post(promote))
        .route("/api/operators/{name}/abort", post(abort))
        .route("/api/swaps", get(history))
        .route("/api/swaps/{id}", get(one_swap))
        .route("/api/tasks", get(tasks))
        .route("/api/tap/{point}", get(super::tap::tap))
        .route("/api/state/{operator}", get(super::state::state))
        .layer(guard.clone());
    let app = if state.metrics {
        let mut observe = Router::new()
            .route("/metrics", get(metrics))
            .route("/dashboard/snapshot", get(snapshot));
        if state.metrics_need_token {
            observe = observe.layer(guard);
        }
        api.merge(observe)
            .route("/", get(super::dashboard::page))
            .route("/dashboard.js", get(super::dashboard::script))
            .route("/dashboard.css", get(super::dashboard::style))
    } else {
        api
    };
    app.layer(host)
        .layer(middleware::from_fn(super::guard::security_headers))
        .with_state(state)
}

/// The plugins running now, for the metrics and the dashboard.
fn plugins(swaps: &Swaps) -> Vec<PluginInfo> {
    swaps
        .operators()
        .into_iter()
        .map(|o| PluginInfo {
            operator: o.name,
            name: o.plugin.name,
            version: o.plugin.version,
            digest: o.plugin.digest,
            world: o.world,
            canary: o.canary.and_then(|c| serde_json::to_value(c).ok()),
        })
        .collect()
}

async fn metrics(State(state): State<AdminState>) -> Response {
    let text = state.telemetry.render(&plugins(&state.swaps));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn tasks(State(state): State<AdminState>) -> impl IntoResponse {
    Json(state.telemetry.tasks())
}

async fn snapshot(State(state): State<AdminState>) -> impl IntoResponse {
    Json(state.telemetry.snapshot(plugins(&state.swaps)))
}

/// Refuses a request without `Authorization: Bearer <token>` (401).
async fn require_token(State(state): State<AdminState>, request: Request, next: Next) -> Response {
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

/// The pipelines this process runs (one) with their plugin operators, and
/// the largest component a swap may upload.
async fn pipelines(State(state): State<AdminState>) -> impl IntoResponse {
    Json(serde_json::json!([{
        "name": state.swaps.pipeline(),
        "operators": state.swaps.operators(),
        "max_plugin_bytes": state.max_plugin_bytes,
    }]))
}

async fn operators(State(state): State<AdminState>) -> impl IntoResponse {
    Json(state.swaps.operators())
}

async fn history(State(state): State<AdminState>) -> impl IntoResponse {
    Json(state.swaps.history())
}

async fn swap(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = component(&headers) {
        return refused;
    }
    let file = query_value(query.as_deref(), "file");
    let how = crate::swap::SwapOptions {
        force: query_is(query.as_deref(), "force", "true"),
        migrate_every_key: query_is(query.as_deref(), "migrate", "eager"),
    };
    let swaps = state.swaps.clone();
    blocking(move || swaps.swap(&name, &body, file.as_deref(), how)).await
}

/// `POST /api/operators/{name}/shadow?share=S&file=F`: the component runs
/// beside the current version on `share` of the records (all by default).
async fn shadow(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let trial = match trial(&state, query.as_deref(), &headers, "shadow runs", Some(1.0)) {
        Ok(trial) => trial,
        Err(refused) => return *refused,
    };
    let swaps = state.swaps.clone();
    blocking(move || swaps.shadow(&name, &body, trial.file.as_deref(), trial.share)).await
}

/// `POST /api/operators/{name}/canary?share=S&file=F`: the component
/// handles the key groups of `share` (needed).
async fn canary(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let trial = match trial(&state, query.as_deref(), &headers, "canaries", None) {
        Ok(trial) => trial,
        Err(refused) => return *refused,
    };
    let swaps = state.swaps.clone();
    blocking(move || swaps.canary(&name, &body, trial.file.as_deref(), trial.share)).await
}

/// A shadow's or canary's request: the client's file and the share.
struct Trial {
    file: Option<String>,
    share: f64,
}

/// The trial `query` asks for (`share` defaulting to `default`), or the
/// refusal of a body that is no component, of cluster mode (where `what`
/// is not built), or of a share that is no number.
fn trial(
    state: &AdminState,
    query: Option<&str>,
    headers: &HeaderMap,
    what: &str,
    default: Option<f64>,
) -> Result<Trial, Box<Response>> {
    if let Some(refused) = component(headers) {
        return Err(Box::new(refused));
    }
    if state.cluster {
        return Err(Box::new(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("{what} are not built for cluster mode: swap the plugin on probation instead"),
        )));
    }
    let share = match (query_value(query, "share").map(|s| s.parse::<f64>()), default) {
        (None, Some(default)) => default,
        (Some(Ok(share)), _) => share,
        _ => {
            return Err(Box::new(error(
                StatusCode::BAD_REQUEST,
                "`share` is a number above 0 and at most 1".into(),
            )));
        }
    };
    Ok(Trial {
        file: query_value(query, "file"),
        share,
    })
}

/// The refusal of a body that is not a component's bytes (a path would let
/// the API read files of the host); none when it is one.
fn component(headers: &HeaderMap) -> Option<Response> {
    let wasm = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/wasm"));
    (!wasm).then(|| {
        error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the component's bytes as `Content-Type: application/wasm`".into(),
        )
    })
}

/// Whether a query string gives `name` as `value`.
fn query_is(query: Option<&str>, name: &str, value: &str) -> bool {
    query_value(query, name).is_some_and(|v| v == value)
}

/// The value of `name` in a query string, if given.
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

async fn promote(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let swaps = state.swaps.clone();
    blocking(move || swaps.promote(&name)).await
}

async fn abort(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let swaps = state.swaps.clone();
    blocking(move || swaps.abort(&name)).await
}

async fn one_swap(State(state): State<AdminState>, Path(id): Path<u64>) -> Response {
    match state.swaps.swap_record(id) {
        Ok(record) => Json(record).into_response(),
        Err(e) => error(StatusCode::NOT_FOUND, e.to_string()),
    }
}

async fn rollback(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let force = query_is(query.as_deref(), "force", "true");
    let swaps = state.swaps.clone();
    blocking(move || swaps.rollback(&name, force)).await
}

/// Runs a swap off the server's thread (compiling takes a while).
async fn blocking(
    f: impl FnOnce() -> Result<crate::swap::SwapRecord, SwapError> + Send + 'static,
) -> Response {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(record)) => (StatusCode::ACCEPTED, Json(record)).into_response(),
        Ok(Err(e @ (SwapError::NoOperator(_) | SwapError::NoSwap(_)))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Ok(Err(e)) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

pub(super) fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}
