//! CORS as llama-server answers it (server-http.cpp's pre-routing handler): every response
//! gets `Access-Control-Allow-Origin` from `--cors-origins`, and a preflight `OPTIONS` is
//! answered at once (before the API key, which browsers do not send with it) with the
//! allowed credentials, methods and headers.

use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;

/// `--cors-*` and the flags that narrow the default origins.
#[derive(clap::Args, Debug, Clone)]
pub struct CorsArgs {
    /// Comma-separated list of allowed origins; `localhost` reflects the `Origin` header
    /// only when it is a localhost origin [default: *, or localhost with --tools].
    #[arg(long)]
    pub cors_origins: Option<String>,
    /// Comma-separated list of allowed methods.
    #[arg(long, default_value = "GET, POST, DELETE, OPTIONS")]
    pub cors_methods: String,
    /// Comma-separated list of allowed headers.
    #[arg(long, default_value = "*")]
    pub cors_headers: String,
    /// Do not allow credentials (with origins `*`, the `Origin` is then not echoed).
    #[arg(long, overrides_with = "cors_credentials")]
    pub no_cors_credentials: bool,
    /// Allow credentials (the default).
    #[arg(long)]
    pub cors_credentials: bool,
    /// llama-server's built-in agent tools. pocket has none: the flag is accepted (and
    /// reported at start) only for what it also does on llama-server, narrowing the
    /// default `--cors-origins` to localhost.
    #[arg(long, value_name = "TOOL1,TOOL2,...")]
    pub tools: Option<String>,
}

/// The origins a response allows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origins {
    /// `*` with credentials: the request's `Origin`, echoed.
    Echo,
    /// `localhost`: the request's `Origin` when its host is localhost, else none.
    Localhost,
    /// Any other value, sent as it is (`*` without credentials, or a list).
    Fixed(String),
}

impl CorsArgs {
    fn origins(&self) -> Origins {
        let default = match self.tools.is_some() {
            true => "localhost",
            false => "*",
        };
        match self.cors_origins.as_deref().unwrap_or(default) {
            "*" if !self.no_cors_credentials => Origins::Echo,
            "localhost" => Origins::Localhost,
            other => Origins::Fixed(other.to_string()),
        }
    }

    /// Sets the CORS headers of `resp` for a request with `headers`.
    pub fn apply(&self, headers: &HeaderMap, preflight: bool, resp: &mut Response) {
        let origin = headers.get(header::ORIGIN);
        let allow = match self.origins() {
            Origins::Echo => origin.cloned(),
            Origins::Localhost => origin
                .filter(|o| o.to_str().is_ok_and(origin_is_localhost))
                .cloned(),
            Origins::Fixed(s) => HeaderValue::from_str(&s).ok(),
        };
        let h = resp.headers_mut();
        if let Some(v) = allow {
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        }
        if preflight {
            let credentials = match self.no_cors_credentials {
                true => "false",
                false => "true",
            };
            let value = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static(""));
            h.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, value(credentials));
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                value(&self.cors_methods),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                value(&self.cors_headers),
            );
        }
    }
}

/// Whether `origin` (`scheme://[user@]host[:port][/path]`) is http(s) on localhost,
/// 127.0.0.1 or ::1, as llama.cpp's `common_http_parse_url` reads it.
pub fn origin_is_localhost(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    if scheme != "http" && scheme != "https" {
        return false;
    }
    let rest = rest.split_once('@').map_or(rest, |(_, r)| r);
    let authority = rest.split_once('/').map_or(rest, |(a, _)| a);
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let Some((host, after)) = inner.split_once(']') else {
            return false;
        };
        (host, after.strip_prefix(':'))
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    // A port that does not start with digits makes llama.cpp's parse throw.
    if port.is_some_and(|p| !p.starts_with(|c: char| c.is_ascii_digit())) {
        return false;
    }
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localhost_origins_as_llama_server_reads_them() {
        for o in [
            "http://localhost",
            "http://localhost:8080",
            "http://127.0.0.1",
            "https://127.0.0.1:3000/x",
            "http://[::1]",
            "http://[::1]:3000",
            "http://user@localhost",
        ] {
            assert!(origin_is_localhost(o), "{o}");
        }
        for o in [
            "http://web.mydomain.fr",
            "http://evil.com",
            "http://notlocalhost",
            "http://localhost.evil.com",
            "localhost",
            "ftp://localhost",
            "http://localhost:abc",
            "http://[::1",
        ] {
            assert!(!origin_is_localhost(o), "{o}");
        }
    }
}
