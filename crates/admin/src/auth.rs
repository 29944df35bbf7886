//! The admin token: `Authorization: Bearer <token>` on every API request, and nowhere else
//! (never in a URL, where it would end up in logs and browser history).

use crate::{error, Ctx};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The configured token, kept as its SHA-256. Comparing digests in constant time tells a
/// caller neither where a wrong token first differs nor how long the right one is.
#[derive(Clone)]
pub(crate) struct Token([u8; 32]);

impl Token {
    /// The token, if one is configured (an empty one is none).
    pub(crate) fn new(token: Option<&str>) -> Option<Token> {
        token.filter(|t| !t.is_empty()).map(|t| Token(sha256(t)))
    }

    /// Whether `given` is the token.
    pub(crate) fn matches(&self, given: &str) -> bool {
        constant_time_eq(&sha256(given), &self.0)
    }
}

fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Equality whose time depends only on the lengths, never on the contents.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// The token from an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start())
}

/// Refuses API requests without the token (when one is configured).
pub(crate) async fn require_token(
    State(ctx): State<Ctx>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    if let Some(token) = &ctx.token {
        if !bearer(&headers).is_some_and(|given| token.matches(given)) {
            return error(
                StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token (send Authorization: Bearer <admin.token>)".into(),
            );
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_answers_like_eq() {
        for (a, b) in [
            ("", ""),
            ("s3cret", "s3cret"),
            ("s3cret", "s3creT"),
            ("s3cret", "S3cret"),
            ("s3cret", "s3cre"),
            ("s3cret", "s3crets"),
            ("s3cret", ""),
            ("", "x"),
        ] {
            assert_eq!(
                constant_time_eq(a.as_bytes(), b.as_bytes()),
                a == b,
                "{a:?} vs {b:?}"
            );
        }
    }

    #[test]
    fn token_matches_only_itself() {
        let t = Token::new(Some("t0ken")).expect("a token");
        assert!(t.matches("t0ken"));
        for wrong in ["", "t0ke", "t0kenn", "T0ken", "t0ken ", " t0ken", "x0ken"] {
            assert!(!t.matches(wrong), "{wrong:?}");
        }
        assert!(Token::new(Some("")).is_none(), "an empty token is no token");
        assert!(Token::new(None).is_none());
    }

    #[test]
    fn bearer_header_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        for (value, want) in [
            ("Bearer t0ken", Some("t0ken")),
            ("bearer t0ken", Some("t0ken")),
            ("Basic dXNlcjpw", None),
            ("Bearer", None),
        ] {
            h.insert("authorization", value.parse().unwrap());
            assert_eq!(bearer(&h), want, "{value:?}");
        }
    }
}
