//! The dashboard: one page, its script and its style, compiled into the
//! binary so that it works with no network beyond the admin server.

use axum::http::header;
use axum::response::IntoResponse;

/// `GET /`.
pub async fn page() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("dashboard/index.html"),
    )
}

/// `GET /dashboard.js`.
pub async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("dashboard/dashboard.js"),
    )
}

/// `GET /dashboard.css`.
pub async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("dashboard/dashboard.css"),
    )
}
