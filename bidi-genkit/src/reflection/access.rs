//! Who may call the reflection API: Genkit's tools on this machine. A request is refused when
//! its `Host` is not a name the runtime was bound on (DNS rebinding), when it carries an
//! `Origin` (a page in a browser: Genkit's tools call from their own process and send none),
//! when it lacks the tools' secret (if one is set), or when a `POST` body is not JSON (a
//! cross-site form or `text/plain` post, which browsers send without asking first).

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, HeaderName, Method, StatusCode, header};
use axum::response::Response;
use bidi_flow::text::cap;

use super::server::error_response;

/// The header that carries the secret when the tools set one.
const SECRET_HEADER: HeaderName = HeaderName::from_static("x-genkit-reflection-secret");

/// The checks every request passes before its route.
#[derive(Debug)]
pub(crate) struct Access {
    /// `host:port` authorities a request's `Host` may name, lowercase.
    hosts: Vec<String>,
    /// `GENKIT_REFLECTION_SECRET_TOKEN`, when set: every request carries it.
    secret: Option<String>,
}

impl Access {
    /// Requests to `addr` (bound on `host`, `GENKIT_REFLECTION_HOST`, when set): its loopback
    /// names and `host`'s, with the port bound.
    pub(crate) fn new(addr: SocketAddr, host: Option<&str>, secret: Option<String>) -> Self {
        let port = addr.port();
        let mut names: Vec<String> = ["127.0.0.1", "localhost", "[::1]"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        names.extend(host.map(authority_host));
        if !addr.ip().is_unspecified() {
            names.push(authority_host(&addr.ip().to_string()));
        }
        let mut hosts: Vec<String> = names
            .into_iter()
            .map(|name| format!("{}:{port}", name.to_ascii_lowercase()))
            .collect();
        hosts.sort();
        hosts.dedup();
        Self { hosts, secret }
    }

    /// A runtime with no secret, for the unit tests of the routes.
    #[cfg(test)]
    pub(crate) fn loopback(port: u16) -> Self {
        Self::new(SocketAddr::from(([127, 0, 0, 1], port)), None, None)
    }

    /// The refusal of a request of `method` with `headers`, in the API's error shape; `None`
    /// when it may go on. 403 (code 7, permission denied) for a foreign `Host` or any
    /// `Origin`, 401 (code 16) without the secret, 415 (code 3) for a body that is not JSON.
    pub(crate) fn refusal(&self, method: &Method, headers: &HeaderMap) -> Option<Response> {
        let host = headers
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .map(str::to_ascii_lowercase);
        // Port 80 is left out of `Host` by clients.
        let named = host.as_deref().is_some_and(|host| {
            self.hosts.iter().any(|allowed| {
                allowed == host || allowed.strip_suffix(":80").is_some_and(|bare| bare == host)
            })
        });
        if !named {
            let message = match host {
                Some(host) => format!(
                    "this runtime's reflection API answers requests to this machine's loopback \
                     names, not to `{}`",
                    cap(&host)
                ),
                None => "this runtime's reflection API needs a request's Host".to_owned(),
            };
            return Some(error_response(StatusCode::FORBIDDEN, 7, &message, None));
        }
        if headers.contains_key(header::ORIGIN) {
            return Some(error_response(
                StatusCode::FORBIDDEN,
                7,
                "this runtime's reflection API answers Genkit's tools, not pages in a browser \
                 (the request has an Origin)",
                None,
            ));
        }
        if let Some(secret) = &self.secret
            && !carries(headers, secret)
        {
            return Some(error_response(
                StatusCode::UNAUTHORIZED,
                16,
                "this runtime's reflection API needs the secret of the tools that started it \
                 (the x-genkit-reflection-secret header)",
                None,
            ));
        }
        if method == Method::POST && !json(headers) {
            return Some(error_response(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                3,
                "this runtime's reflection API takes JSON bodies (Content-Type: application/json)",
                None,
            ));
        }
        None
    }
}

/// `host` as a request's `Host` names it: an IPv6 address in brackets.
fn authority_host(host: &str) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]"),
        _ => host.to_owned(),
    }
}

/// Whether the body is JSON by its `Content-Type`: `application/json`, or a `+json` type.
fn json(headers: &HeaderMap) -> bool {
    let Some(content_type) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
    else {
        return false;
    };
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|subtype| subtype.ends_with("+json"))
}

/// Whether `headers` carry `secret`, compared in constant time.
fn carries(headers: &HeaderMap, secret: &str) -> bool {
    let Some(sent) = headers.get(SECRET_HEADER) else {
        return false;
    };
    let (sent, secret) = (sent.as_bytes(), secret.as_bytes());
    sent.len() == secret.len()
        && sent
            .iter()
            .zip(secret)
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(HeaderName, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (name.clone(), HeaderValue::from_static(value)))
            .collect()
    }

    fn status(access: &Access, method: &Method, headers: &HeaderMap) -> u16 {
        access
            .refusal(method, headers)
            .map_or(200, |refused| refused.status().as_u16())
    }

    #[test]
    fn the_secret_is_compared_whole() {
        let mut headers = HeaderMap::new();
        assert!(!carries(&headers, "s3cret"));
        for (sent, ok) in [
            ("s3cret", true),
            ("s3cre", false),
            ("s3cret!", false),
            ("S3cret", false),
        ] {
            headers.insert(SECRET_HEADER, HeaderValue::from_static(sent));
            assert_eq!(carries(&headers, "s3cret"), ok, "{sent}");
        }
    }

    #[test]
    fn hosts_are_the_loopback_names_and_the_bound_ones_with_the_port() {
        let access = Access::loopback(3100);
        for (host, allowed) in [
            ("127.0.0.1:3100", 200),
            ("LOCALHOST:3100", 200),
            ("[::1]:3100", 200),
            ("localhost:3101", 403),
            ("localhost", 403),
            ("evil.example:3100", 403),
            ("127.0.0.1.evil.example:3100", 403),
        ] {
            let headers = headers(&[(header::HOST, host)]);
            assert_eq!(status(&access, &Method::GET, &headers), allowed, "{host}");
        }
        assert_eq!(status(&access, &Method::GET, &HeaderMap::new()), 403);

        let lan = Access::new("192.168.1.5:80".parse().unwrap(), Some("devbox"), None);
        for (host, allowed) in [
            ("192.168.1.5", 200),
            ("192.168.1.5:80", 200),
            ("devbox:80", 200),
            ("localhost", 200),
            ("evil.example", 403),
        ] {
            let headers = headers(&[(header::HOST, host)]);
            assert_eq!(status(&lan, &Method::GET, &headers), allowed, "{host}");
        }
        let v6 = Access::new("[::]:3100".parse().unwrap(), Some("::"), None);
        let headers = headers(&[(header::HOST, "[::]:3100")]);
        assert_eq!(status(&v6, &Method::GET, &headers), 200);
    }

    #[test]
    fn browsers_and_bodies_that_are_not_json_are_refused() {
        let access = Access::loopback(3100);
        let host = (header::HOST, "localhost:3100");
        let json = (header::CONTENT_TYPE, "application/json");
        assert_eq!(
            status(
                &access,
                &Method::POST,
                &headers(&[host.clone(), json.clone()])
            ),
            200
        );
        let page = (header::ORIGIN, "http://localhost:3000");
        assert_eq!(
            status(
                &access,
                &Method::POST,
                &headers(&[host.clone(), json, page])
            ),
            403
        );
        for content_type in ["text/plain", "application/x-www-form-urlencoded", "json"] {
            let headers = headers(&[host.clone(), (header::CONTENT_TYPE, content_type)]);
            assert_eq!(
                status(&access, &Method::POST, &headers),
                415,
                "{content_type}"
            );
        }
        for content_type in [
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/vnd.x+json",
        ] {
            let headers = headers(&[host.clone(), (header::CONTENT_TYPE, content_type)]);
            assert_eq!(
                status(&access, &Method::POST, &headers),
                200,
                "{content_type}"
            );
        }
        assert_eq!(
            status(
                &access,
                &Method::POST,
                &headers(std::slice::from_ref(&host))
            ),
            415
        );
        assert_eq!(status(&access, &Method::GET, &headers(&[host])), 200);
    }

    #[test]
    fn a_secret_is_asked_of_every_request() {
        let access = Access::new(
            "127.0.0.1:3100".parse().unwrap(),
            None,
            Some("s3cret".into()),
        );
        let host = (header::HOST, "127.0.0.1:3100");
        assert_eq!(
            status(&access, &Method::GET, &headers(std::slice::from_ref(&host))),
            401
        );
        let secret = (SECRET_HEADER, "s3cret");
        assert_eq!(
            status(&access, &Method::GET, &headers(&[host, secret])),
            200
        );
    }
}
