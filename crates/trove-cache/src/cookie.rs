//! What a shared cache does about cookies (seed 003 §IV.E; RFC 9111 leaves it open).
//!
//! `Set-Cookie` on a stored response is a session handed to the next client unless the cache
//! takes care. [`SetCookiePolicy::Strip`] (the default) stores such a response but never
//! hands its `Set-Cookie` to anyone but the client whose request fetched it, as Squid does;
//! [`SetCookiePolicy::NoStore`] does not store it at all (Varnish's default); `Rfc` follows
//! RFC 9111 alone, which lets a stored `Set-Cookie` be served to everyone (only for origins
//! that mark personal responses `private` without fail).
//!
//! Requests carrying `Cookie`: RFC 9111 ignores them. [`RequestCookiePolicy::Bypass`] sends
//! them past the cache (Varnish's built-in rule), except for responses whose content type is
//! listed in `ignore_for`: the paper's heuristic that images are the same whoever asks.

use http::header;
use http::HeaderMap;
use serde::Deserialize;

/// What to do with a response carrying `Set-Cookie`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SetCookiePolicy {
    /// RFC 9111 only: store it, `Set-Cookie` and all.
    Rfc,
    /// Store it without `Set-Cookie`; only the client that fetched it gets the cookie.
    #[default]
    #[serde(alias = "strip-set-cookie")]
    Strip,
    /// Do not store it.
    #[serde(alias = "no-store-set-cookie")]
    NoStore,
}

impl SetCookiePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            SetCookiePolicy::Rfc => "rfc",
            SetCookiePolicy::Strip => "strip",
            SetCookiePolicy::NoStore => "no-store",
        }
    }
}

/// What to do with a request carrying `Cookie`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RequestCookiePolicy {
    /// RFC 9111: a request's cookies do not matter to the cache.
    #[default]
    Ignore,
    /// Requests with cookies neither use nor fill the cache, except for the content types
    /// of `ignore_for`.
    Bypass,
}

/// The cookie policy (config `[cache.cookies]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CookiePolicy {
    pub set_cookie: SetCookiePolicy,
    pub request_cookie: RequestCookiePolicy,
    /// Content types (a prefix such as `"image/"`, or a whole type) for which request cookies
    /// are ignored under `request_cookie = "bypass"`.
    pub ignore_for: Vec<String>,
}

/// What the cookie policy says about storing one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreCookies {
    /// Store it as it is.
    AsIs,
    /// Store it without these `Set-Cookie` values, which go to the fetching client only.
    Strip(Vec<http::HeaderValue>),
    /// Do not store it.
    Refuse,
}

impl CookiePolicy {
    /// Whether a request with `Cookie` goes past the cache, for a response of
    /// `content_type` (`None`: not known yet, i.e. before a lookup found anything).
    pub fn bypasses(&self, req: &HeaderMap, content_type: Option<&str>) -> bool {
        self.request_cookie == RequestCookiePolicy::Bypass
            && req.contains_key(header::COOKIE)
            && !content_type.is_some_and(|ct| self.ignored_type(ct))
    }

    fn ignored_type(&self, content_type: &str) -> bool {
        let ct = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        self.ignore_for.iter().any(|t| {
            let t = t.to_ascii_lowercase();
            if t.ends_with('/') {
                ct.starts_with(&t)
            } else {
                ct == t
            }
        })
    }

    /// What to do with a storable response's cookies.
    pub fn on_store(&self, resp: &HeaderMap) -> StoreCookies {
        if !trove_http::field::has_field(resp, &header::SET_COOKIE) {
            return StoreCookies::AsIs;
        }
        match self.set_cookie {
            SetCookiePolicy::Rfc => StoreCookies::AsIs,
            SetCookiePolicy::NoStore => StoreCookies::Refuse,
            SetCookiePolicy::Strip => {
                StoreCookies::Strip(resp.get_all(header::SET_COOKIE).iter().cloned().collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(fields: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in fields {
            m.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    #[test]
    fn strip_is_the_default_and_keeps_the_cookies_for_the_fetcher() {
        let p = CookiePolicy::default();
        let resp = h(&[("set-cookie", "a=1"), ("set-cookie", "b=2")]);
        assert_eq!(
            p.on_store(&resp),
            StoreCookies::Strip(vec!["a=1".parse().unwrap(), "b=2".parse().unwrap()])
        );
        assert_eq!(p.on_store(&h(&[])), StoreCookies::AsIs);
    }

    #[test]
    fn bypass_spares_listed_types() {
        let p = CookiePolicy {
            request_cookie: RequestCookiePolicy::Bypass,
            ignore_for: vec!["image/".into(), "text/css".into()],
            ..Default::default()
        };
        let req = h(&[("cookie", "s=1")]);
        assert!(p.bypasses(&req, None));
        assert!(p.bypasses(&req, Some("text/html")));
        assert!(!p.bypasses(&req, Some("image/png")));
        assert!(!p.bypasses(&req, Some("Text/CSS; charset=utf-8")));
        assert!(!p.bypasses(&h(&[]), Some("text/html")));
        assert!(!CookiePolicy::default().bypasses(&req, None));
    }
}
