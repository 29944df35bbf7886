//! The web dashboard: a static page and its script, which poll the API. They hold no data,
//! so they are served without the token; when the API needs one, the page asks for it and
//! sends it as `Authorization: Bearer` (it keeps it in the tab's `sessionStorage`: per
//! origin, gone when the tab closes, never sent by the browser on its own, so no request
//! forgery rides on it). A token in the page's URL is ignored.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// Scripts only from this origin (no inline script: an injected one would not run), data
/// only from the API, no framing, no referrer.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src 'self'; form-action 'none'; \
                   frame-ancestors 'none'; base-uri 'none'";

fn page(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`.
pub(crate) async fn html() -> Response {
    page("text/html; charset=utf-8", include_str!("dashboard.html"))
}

/// `GET /dashboard.js`.
pub(crate) async fn script() -> Response {
    page(
        "text/javascript; charset=utf-8",
        include_str!("dashboard.js"),
    )
}
