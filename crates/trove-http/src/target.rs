//! A request's target, parsed once, validated and normalised: the one form that routing, the
//! cache key, the request sent upstream, invalidation and the access log all use.
//!
//! Two parsers of one thing are a cache-poisoning bug waiting: a router that reads the raw
//! `Host` while the key reads a cleaned one lets `Host: evil@victim.example` be routed to one
//! origin and stored under another's URL; a router that matches the raw path while the key
//! decodes it lets `/%61pi/x` be routed by `/` and stored as `/api/x`. So a [`Target`] is built
//! once from the request line and the `Host` field, everything that follows reads it, and
//! nothing reads the raw forms again.
//!
//! What is accepted, and how it is normalised:
//! - **Authority** (`Host`, or the authority of an absolute-form target, RFC 9112 §3.2):
//!   `host[:port]` only. Userinfo (`user@host`, RFC 9110 §4.2.4: treat as an error), anything
//!   after the port, an empty or out-of-range port, and characters no DNS name or IP literal has
//!   are refused. A name is lowercased and loses one trailing dot (`Example.COM.` and
//!   `example.com` are one host); every label is 1–63 characters of letters, digits, `-` and `_`.
//!   A name that ends in a number is an IPv4 address in one of the forms the C library's
//!   `inet_aton` accepts (`127.1`, `2130706433`, `0x7f.0.0.1`) and is written dotted-decimal,
//!   or refused if it is not one. IPv6 literals are written in their canonical form; zone ids and
//!   IPvFuture are refused. A port equal to the scheme's default is dropped.
//! - **Absolute-form wins over `Host`** (RFC 9112 §3.2.2), but a `Host` field is still
//!   validated: a request with an invalid one is refused whatever its target says.
//! - **Path**: percent-encodings of unreserved characters are decoded, all others written with
//!   uppercase hex (RFC 3986 §6.2.2.2); characters a URI may not contain are percent-encoded;
//!   dot segments are removed after decoding (§6.2.2.3), so `/%2e%2e/` and `/../` are the same
//!   and neither can climb above the root; a `%` not followed by two hex digits is refused.
//!   `%2F` stays encoded: it is not `/`.
//! - **Query**: kept byte for byte.
//!
//! The result is cheap to use on the hit path: one string holds the whole key
//! (`http://authority/path?query`), and the host, authority, path and query are slices of it.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use http::header::HOST;
use http::{HeaderMap, Uri, Version};

/// Why a request target was refused. Every case is the client's fault: a 400, except
/// [`TargetError::Scheme`] (501: trove does not proxy that scheme).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetError {
    /// No `Host` field in an HTTP/1.1 request, or more than one (RFC 9112 §3.2).
    HostCount,
    /// No host in the target or the `Host` field.
    NoHost,
    /// A host that is not a DNS name or an IP literal.
    BadHost,
    /// `user@host` (RFC 9110 §4.2.4).
    UserInfo,
    /// A port that is not a number from 1 to 65535.
    BadPort,
    /// A `%` not followed by two hex digits, or a target that is not origin-, absolute- or
    /// asterisk-form.
    BadPath,
    /// A scheme other than `http` (or, for [`Target::from_absolute`], `https`).
    Scheme,
}

impl TargetError {
    /// A short reason, for the refusal's body and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetError::HostCount => "exactly one Host field is required",
            TargetError::NoHost => "no host in the request",
            TargetError::BadHost => "invalid host",
            TargetError::UserInfo => "userinfo (user@) in a URL is refused",
            TargetError::BadPort => "invalid port",
            TargetError::BadPath => "invalid request target",
            TargetError::Scheme => "only http:// and https:// URLs can be proxied",
        }
    }
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for TargetError {}

/// A validated, normalised `http` (or `https`) target URI. See the module docs for the rules.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// `scheme://authority/path?query`: the primary cache key (RFC 9111 §2), and what the
    /// access log prints.
    key: String,
    /// Length of `scheme://`.
    scheme_end: usize,
    host_end: usize,
    authority_end: usize,
    path_end: usize,
    port: u16,
    asterisk: bool,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Target").field(&self.key).finish()
    }
}

impl Target {
    /// The target of a request from its request line (`target`, as the head parser read it)
    /// and its header fields: `http`, or `https` in absolute form (a forward proxy's client
    /// asking it to fetch over TLS); any other scheme is [`TargetError::Scheme`].
    /// Authority-form (CONNECT) is not a target of this kind.
    pub fn from_request(
        target: &Uri,
        headers: &HeaderMap,
        version: Version,
    ) -> Result<Target, TargetError> {
        let mut hosts = headers.get_all(HOST).iter();
        let host_field = hosts.next();
        if hosts.next().is_some() || (host_field.is_none() && version == Version::HTTP_11) {
            return Err(TargetError::HostCount);
        }
        // Validated even when the target's own authority wins.
        let field_authority = match host_field {
            Some(v) => {
                let s = std::str::from_utf8(v.as_bytes()).map_err(|_| TargetError::BadHost)?;
                Some(parse_authority(s.trim_matches([' ', '\t']))?)
            }
            None => None,
        };
        if let Some(scheme) = target.scheme_str() {
            if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
                return Err(TargetError::Scheme);
            }
            return Target::from_absolute(target);
        }
        let authority = field_authority.ok_or(TargetError::NoHost)?;
        let pq = target.path_and_query().map_or("", |pq| pq.as_str());
        if pq == "*" {
            return Target::build(Scheme::Http, &authority, "*", true);
        }
        if !pq.starts_with('/') {
            return Err(TargetError::BadPath);
        }
        Target::build(Scheme::Http, &authority, pq, false)
    }

    /// The target of an absolute `http` or `https` URI (`http://host[:port]/path?query`): an
    /// absolute-form request target, or a `Location` resolved against one.
    pub fn from_absolute(uri: &Uri) -> Result<Target, TargetError> {
        let scheme = uri.scheme_str().ok_or(TargetError::BadPath)?;
        let scheme = if scheme.eq_ignore_ascii_case("http") {
            Scheme::Http
        } else if scheme.eq_ignore_ascii_case("https") {
            Scheme::Https
        } else {
            return Err(TargetError::Scheme);
        };
        let raw = uri.authority().map_or("", |a| a.as_str());
        let authority = parse_authority(raw)?;
        let pq = uri.path_and_query().map_or("", |pq| pq.as_str());
        let pq = if pq.is_empty() {
            "/"
        } else if pq.starts_with('?') {
            // `http://host?q`: the empty path is `/` (RFC 9110 §4.2.3).
            return Target::build(scheme, &authority, &format!("/{pq}"), false);
        } else {
            pq
        };
        if !pq.starts_with('/') {
            return Err(TargetError::BadPath);
        }
        Target::build(scheme, &authority, pq, false)
    }

    /// Parses an absolute URL string (a configured URL, a trace's line) into a target.
    pub fn parse(url: &str) -> Result<Target, TargetError> {
        let uri: Uri = url.parse().map_err(|_| TargetError::BadPath)?;
        Target::from_absolute(&uri)
    }

    fn build(
        scheme: Scheme,
        authority: &Authority,
        path_and_query: &str,
        asterisk: bool,
    ) -> Result<Target, TargetError> {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        if !path_is_valid(path) {
            return Err(TargetError::BadPath);
        }
        let prefix = scheme.prefix();
        let mut key =
            String::with_capacity(prefix.len() + authority.host.len() + 6 + path_and_query.len());
        key.push_str(prefix);
        key.push_str(&authority.host);
        let host_end = key.len();
        let port = authority.port.unwrap_or(scheme.default_port());
        if port != scheme.default_port() {
            key.push(':');
            push_decimal(&mut key, u32::from(port));
        }
        let authority_end = key.len();
        if asterisk {
            key.push('*');
        } else {
            normalise_path(path, &mut key);
        }
        let path_end = key.len();
        if let Some(q) = query {
            key.push('?');
            key.push_str(q);
        }
        Ok(Target {
            key,
            scheme_end: prefix.len(),
            host_end,
            authority_end,
            path_end,
            port,
            asterisk,
        })
    }

    /// The cache key, `http://authority/path?query`; also the URL the access log prints.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key, by value.
    pub fn into_key(self) -> String {
        self.key
    }

    /// Whether the target is an `https` URL (fetched over TLS).
    pub fn is_https(&self) -> bool {
        self.scheme_end == "https://".len()
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &str {
        &self.key[..self.scheme_end - 3]
    }

    /// Scheme, host and port: RFC 9110 §4.3.1's origin, as `scheme://authority`.
    pub fn origin(&self) -> &str {
        &self.key[..self.authority_end]
    }

    /// The host: a lowercase name, a dotted-decimal IPv4 address or a bracketed IPv6 literal.
    pub fn host(&self) -> &str {
        &self.key[self.scheme_end..self.host_end]
    }

    /// The host as a name or address to connect to: without an IPv6 literal's brackets.
    pub fn connect_host(&self) -> &str {
        let h = self.host();
        h.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(h)
    }

    /// The port, the scheme's default (80, 443) filled in.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host[:port]`, the port only when not the default: the `Host` field to send upstream.
    pub fn authority(&self) -> &str {
        &self.key[self.scheme_end..self.authority_end]
    }

    /// The normalised path (`*` for an asterisk-form `OPTIONS *`).
    pub fn path(&self) -> &str {
        &self.key[self.authority_end..self.path_end]
    }

    /// The query, without its `?`.
    pub fn query(&self) -> Option<&str> {
        self.key.get(self.path_end..)?.strip_prefix('?')
    }

    /// Path and query: the origin-form target to send upstream (`*` for `OPTIONS *`).
    pub fn path_and_query(&self) -> &str {
        &self.key[self.authority_end..]
    }

    /// The path routes are matched against: `/` for `OPTIONS *`, which asks about the server.
    pub fn route_path(&self) -> &str {
        if self.asterisk {
            "/"
        } else {
            self.path()
        }
    }

    /// True for `OPTIONS *`.
    pub fn is_asterisk(&self) -> bool {
        self.asterisk
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn prefix(self) -> &'static str {
        match self {
            Scheme::Http => "http://",
            Scheme::Https => "https://",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A parsed authority: the normalised host and the port, if one was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// Lowercase name without a trailing dot, dotted-decimal IPv4, or `[canonical IPv6]`.
    pub host: String,
    /// The port, when the authority names one (`host:` names none).
    pub port: Option<u16>,
}

/// Parses and normalises `host[:port]` (a `Host` field or a URL's authority).
pub fn parse_authority(s: &str) -> Result<Authority, TargetError> {
    if s.is_empty() {
        return Err(TargetError::NoHost);
    }
    if s.as_bytes().contains(&b'@') {
        return Err(TargetError::UserInfo);
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or(TargetError::BadHost)?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(TargetError::BadHost)?),
        };
        // `Ipv6Addr` refuses zone ids (`%25eth0`) and IPvFuture (`v1.x`).
        let ip: Ipv6Addr = inner.parse().map_err(|_| TargetError::BadHost)?;
        (format!("[{ip}]"), port)
    } else {
        let (host, port) = match s.bytes().rposition(|b| b == b':') {
            Some(at) => (&s[..at], Some(&s[at + 1..])),
            None => (s, None),
        };
        (normalise_name(host)?, port)
    };
    let port = match port {
        None | Some("") => None,
        Some(p) => Some(parse_port(p)?),
    };
    Ok(Authority { host, port })
}

fn parse_port(p: &str) -> Result<u16, TargetError> {
    if p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TargetError::BadPort);
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(TargetError::BadPort),
        Ok(n) => Ok(n),
    }
}

/// A reg-name, lowercased, one trailing dot dropped; or an IPv4 address in dotted-decimal.
/// One pass over the bytes (this runs for every request's Host).
fn normalise_name(host: &str) -> Result<String, TargetError> {
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.is_empty() || name.len() > 253 {
        return Err(TargetError::BadHost);
    }
    let mut label = 0usize;
    let mut last_label = 0usize;
    let mut upper = false;
    for (i, &b) in name.as_bytes().iter().enumerate() {
        if b == b'.' {
            if label == 0 {
                return Err(TargetError::BadHost);
            }
            label = 0;
            last_label = i + 1;
        } else if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            label += 1;
            if label > 63 {
                return Err(TargetError::BadHost);
            }
            upper |= b.is_ascii_uppercase();
        } else {
            return Err(TargetError::BadHost);
        }
    }
    if label == 0 {
        return Err(TargetError::BadHost);
    }
    if ends_in_number(&name.as_bytes()[last_label..]) {
        let ip = parse_ipv4_literal(name).ok_or(TargetError::BadHost)?;
        let mut out = String::with_capacity(15);
        push_dotted(&mut out, ip);
        return Ok(out);
    }
    Ok(if upper {
        name.to_ascii_lowercase()
    } else {
        name.to_owned()
    })
}

/// WHATWG URL's "ends in a number": the last label is decimal digits or `0x` hex, so the
/// name can only be read as an IPv4 address (or not at all), never as a DNS name.
fn ends_in_number(last: &[u8]) -> bool {
    if !last.is_empty() && last.iter().all(u8::is_ascii_digit) {
        return true;
    }
    match last
        .strip_prefix(b"0x")
        .or_else(|| last.strip_prefix(b"0X"))
    {
        Some(hex) => hex.iter().all(u8::is_ascii_hexdigit),
        None => false,
    }
}

/// `ip` in dotted decimal, as `Ipv4Addr`'s `Display` writes it, without the formatter.
fn push_dotted(out: &mut String, ip: Ipv4Addr) {
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_decimal(out, u32::from(octet));
    }
}

/// `n` in decimal.
fn push_decimal(out: &mut String, n: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// An IPv4 address in any form the C library's `inet_aton` accepts, which is what
/// `getaddrinfo` turns into an address without asking DNS: one to four parts, each decimal,
/// octal (leading `0`) or hex (`0x`), the last filling the remaining bytes (`127.1`,
/// `2130706433`, `0x7f.1`, `017700000001`). The one IPv4 parser: the target normaliser writes
/// such hosts dotted-decimal with it, and the forward proxy's destination guard judges
/// literal hosts with it.
pub fn parse_ipv4_literal(s: &str) -> Option<Ipv4Addr> {
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    let mut parts = [0u32; 4];
    let mut n = 0;
    for p in s.as_bytes().split(|b| *b == b'.') {
        if n == 4 {
            return None;
        }
        parts[n] = parse_part(p)?;
        n += 1;
    }
    let mut v: u32 = 0;
    for (i, part) in parts[..n - 1].iter().enumerate() {
        if *part > 255 {
            return None;
        }
        v |= part << (24 - 8 * i);
    }
    let last = parts[n - 1];
    let bits = 8 * (5 - n as u32); // n = 1: 32 bits, 2: 24, 3: 16, 4: 8
    if bits < 32 && last >> bits != 0 {
        return None;
    }
    Some(Ipv4Addr::from(v | last))
}

/// One part of an `inet_aton` address: digits only (no sign), at most a `u32`.
fn parse_part(p: &[u8]) -> Option<u32> {
    let (digits, radix) = if let Some(h) = p.strip_prefix(b"0x").or_else(|| p.strip_prefix(b"0X")) {
        (h, 16)
    } else if p.len() > 1 && p[0] == b'0' {
        (&p[1..], 8)
    } else {
        (p, 10)
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: u32 = 0;
    for &b in digits {
        let d = char::from(b).to_digit(radix)?;
        v = v.checked_mul(radix)?.checked_add(d)?;
    }
    Some(v)
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// What a path may hold as it is (RFC 3986 §3.3: pchar and `/`), other than `%`.
fn is_path_char(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'/'
        )
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn push_encoded(out: &mut String, b: u8) {
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 15)]));
}

/// Appends the normalised form of `path` (which starts with `/`) to `out`; see the module docs.
/// A malformed percent-encoding is written as `%25` (an encoded `%`); [`Target`] refuses such
/// paths before it gets here ([`path_is_valid`]).
fn normalise_path(path: &str, out: &mut String) {
    let bytes = path.as_bytes();
    let plain = bytes.iter().all(|&b| is_path_char(b)) && !has_dot_segment(bytes);
    if plain {
        out.push_str(path);
        return;
    }
    let start = out.len();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let pair = bytes
                .get(i + 1)
                .copied()
                .and_then(hex_value)
                .zip(bytes.get(i + 2).copied().and_then(hex_value));
            if let Some((h, l)) = pair {
                let decoded = h * 16 + l;
                if is_unreserved(decoded) {
                    out.push(char::from(decoded));
                } else {
                    push_encoded(out, decoded);
                }
                i += 3;
                continue;
            }
            push_encoded(out, b);
        } else if is_path_char(b) {
            out.push(char::from(b));
        } else {
            push_encoded(out, b);
        }
        i += 1;
    }
    if has_dot_segment(&out.as_bytes()[start..]) {
        let cleaned = remove_dot_segments(&out[start..]);
        out.truncate(start);
        out.push_str(&cleaned);
    }
}

/// The normal form of an absolute path (as in a [`Target`]), for comparing configured paths
/// (a route's prefix) with request paths. `None` for a path that is not absolute or has a
/// malformed escape.
pub fn normal_path(path: &str) -> Option<String> {
    if !path.starts_with('/') || !path_is_valid(path) {
        return None;
    }
    let mut out = String::with_capacity(path.len());
    normalise_path(path, &mut out);
    Some(out)
}

/// True when every `%` in `path` starts a two-hex-digit escape.
pub fn path_is_valid(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || (bytes.get(i + 1).copied().and_then(hex_value).is_some()
                && bytes.get(i + 2).copied().and_then(hex_value).is_some())
    })
}

fn has_dot_segment(path: &[u8]) -> bool {
    path.split(|&b| b == b'/')
        .any(|seg| seg == b"." || seg == b"..")
}

/// RFC 3986 §5.2.4 for an absolute path: `.` segments go, `..` removes the one before it and
/// never climbs above the root; a trailing `.` or `..` leaves a trailing `/`.
pub fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." | ".." => {
                if *seg == ".." {
                    out.pop();
                }
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut s = String::with_capacity(path.len());
    s.push('/');
    s.push_str(&out.join("/"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn req(target: &str, host: Option<&str>) -> Result<Target, TargetError> {
        let mut h = HeaderMap::new();
        if let Some(host) = host {
            h.insert(HOST, HeaderValue::from_str(host).expect("value"));
        }
        let uri: Uri = target.parse().expect("uri");
        Target::from_request(&uri, &h, Version::HTTP_11)
    }

    fn key(target: &str, host: &str) -> String {
        req(target, Some(host)).expect("valid").key().to_string()
    }

    #[test]
    fn parts_are_slices_of_the_key() {
        let t = req("/a/b?x=1&y", Some("Example.COM:8080")).unwrap();
        assert_eq!(t.key(), "http://example.com:8080/a/b?x=1&y");
        assert_eq!(t.host(), "example.com");
        assert_eq!(t.authority(), "example.com:8080");
        assert_eq!(t.port(), 8080);
        assert_eq!(t.path(), "/a/b");
        assert_eq!(t.query(), Some("x=1&y"));
        assert_eq!(t.path_and_query(), "/a/b?x=1&y");
        let t = req("/", Some("h")).unwrap();
        assert_eq!((t.port(), t.query(), t.authority()), (80, None, "h"));
    }

    #[test]
    fn forward_and_reverse_share_one_key() {
        let a = req("http://Example.COM:80/a", Some("other.example")).unwrap();
        let b = req("/a", Some("example.com")).unwrap();
        assert_eq!(a, b);
        assert_eq!(key("http://h", "h"), "http://h/");
        assert_eq!(key("http://h?q", "h"), "http://h/?q");
    }

    #[test]
    fn invalid_hosts_are_refused_9110_7_2() {
        for host in [
            "evil@victim.example",
            "victim.example/cache",
            "localhost?a=",
            "local host",
            "localhost#x",
            "+ localhost",
            "localhost:80x",
            "localhost:0",
            "localhost:65536",
            "localhost:-1",
            "a..b",
            ".a",
            "a%2eb",
            "[::1",
            "[::1]x",
            "[fe80::1%25eth0]",
            "[v1.x]",
            "::1",
            "256.1.1.1",
            "1.2.3.4.5",
            "1.2.3.0x100",
            "",
            "a\\b",
            "é.example",
        ] {
            let got = req("/x", Some(host));
            assert!(got.is_err(), "{host:?} was accepted as {got:?}");
        }
        // An empty port is the default one (RFC 3986 §6.2.3).
        assert_eq!(key("/x", "localhost:"), "http://localhost/x");
    }

    #[test]
    fn host_normalisation() {
        assert_eq!(key("/", "Victim.Example."), "http://victim.example/");
        assert_eq!(key("/", "victim.example:80"), "http://victim.example/");
        assert_eq!(key("/", "victim.example:080"), "http://victim.example/");
        assert_eq!(key("/", "[::FFFF:127.0.0.1]"), "http://[::ffff:127.0.0.1]/");
        assert_eq!(key("/", "[0:0::1]:8080"), "http://[::1]:8080/");
        assert_eq!(key("/", "127.1"), "http://127.0.0.1/");
        assert_eq!(key("/", "2130706433"), "http://127.0.0.1/");
        assert_eq!(key("/", "0x7f.1"), "http://127.0.0.1/");
        assert_eq!(key("/", "017700000001"), "http://127.0.0.1/");
        assert_eq!(key("/", "0"), "http://0.0.0.0/");
        assert_eq!(
            key("/", "under_score.example"),
            "http://under_score.example/"
        );
        assert_eq!(key("/", "1a.example"), "http://1a.example/");
        assert_eq!(key("/", "127.0.0.1:18090"), "http://127.0.0.1:18090/");
        assert_eq!(key("/", "255.255.255.255:1"), "http://255.255.255.255:1/");
        assert_eq!(key("/", "h:65535"), "http://h:65535/");
        for bad in [
            "256.0.0.1",
            "1.2.3.4.5",
            "1..2",
            ".1.2",
            "1.2.3.0x100",
            "09.1",
        ] {
            assert!(req("/", Some(bad)).is_err(), "{bad} was accepted");
        }
    }

    /// The dotted writer and the decimal writer agree with the standard library's.
    #[test]
    fn written_addresses_and_ports_match_display() {
        let mut x: u32 = 0x9e37_79b9;
        for n in (0..5_000u32).chain([0, 1, 9, 10, 99, 100, 255, u32::MAX]) {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let ip = Ipv4Addr::from(x ^ n);
            let mut out = String::new();
            push_dotted(&mut out, ip);
            assert_eq!(out, ip.to_string());
            let mut out = String::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn userinfo_in_absolute_form_is_refused_9110_4_2_4() {
        assert_eq!(
            req("http://evil@victim.example/x", Some("victim.example")).err(),
            Some(TargetError::UserInfo)
        );
    }

    #[test]
    fn an_invalid_host_field_is_refused_even_with_absolute_form() {
        assert!(req("http://victim.example/x", Some("a b")).is_err());
        assert!(req("http://victim.example/x", Some("victim.example")).is_ok());
    }

    #[test]
    fn host_field_count_9112_3_2() {
        let uri: Uri = "/".parse().unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(
            Target::from_request(&uri, &h, Version::HTTP_11).err(),
            Some(TargetError::HostCount)
        );
        assert_eq!(
            Target::from_request(&uri, &h, Version::HTTP_10).err(),
            Some(TargetError::NoHost)
        );
        h.append(HOST, HeaderValue::from_static("a"));
        h.append(HOST, HeaderValue::from_static("a"));
        assert_eq!(
            Target::from_request(&uri, &h, Version::HTTP_11).err(),
            Some(TargetError::HostCount)
        );
    }

    #[test]
    fn other_schemes_are_not_proxied() {
        let https = req("https://a/x", Some("a")).unwrap();
        assert_eq!((https.key(), https.is_https()), ("https://a/x", true));
        assert_eq!(req("ftp://a/x", Some("a")).err(), Some(TargetError::Scheme));
        // An https URL is still a target for keys and invalidation.
        let t = Target::parse("HTTPS://A:443/x").unwrap();
        assert_eq!(
            (t.key(), t.scheme(), t.port()),
            ("https://a/x", "https", 443)
        );
        assert_eq!(t.origin(), "https://a");
    }

    #[test]
    fn path_normalisation_3986_6_2_2() {
        assert_eq!(key("/%61pi/x", "h"), "http://h/api/x");
        assert_eq!(key("/%7euser/%7E", "h"), "http://h/~user/~");
        assert_eq!(key("/a%2fb", "h"), "http://h/a%2Fb");
        assert_eq!(key("/a%2Fb", "h"), "http://h/a%2Fb");
        assert_eq!(key("/a/./b/../c", "h"), "http://h/a/c");
        assert_eq!(key("/a/%2e%2E/c", "h"), "http://h/c");
        assert_eq!(key("/../../etc", "h"), "http://h/etc");
        assert_eq!(key("/a/..", "h"), "http://h/");
        assert_eq!(key("/a/.", "h"), "http://h/a/");
        assert_eq!(key("/a/b/", "h"), "http://h/a/b/");
        assert_eq!(key("/a//b", "h"), "http://h/a//b");
        assert_eq!(key("/a.b/..c/.d", "h"), "http://h/a.b/..c/.d");
        assert_eq!(key("/%5c", "h"), "http://h/%5C");
        assert_eq!(key("/x?%61=/../", "h"), "http://h/x?%61=/../");
    }

    #[test]
    fn characters_a_uri_may_not_hold_are_encoded() {
        // `http::Uri` accepts some of these in a request line; the normal form encodes them.
        for (raw, want) in [
            ("/a|b", "/a%7Cb"),
            ("/a{b}", "/a%7Bb%7D"),
            ("/a^b", "/a%5Eb"),
        ] {
            if let Ok(uri) = raw.parse::<Uri>() {
                let mut h = HeaderMap::new();
                h.insert(HOST, HeaderValue::from_static("h"));
                let t = Target::from_request(&uri, &h, Version::HTTP_11).unwrap();
                assert_eq!(t.path(), want);
            }
        }
    }

    #[test]
    fn malformed_percent_encoding_is_refused() {
        assert_eq!(req("/a%zz", Some("h")).err(), Some(TargetError::BadPath));
        assert_eq!(req("/a%4", Some("h")).err(), Some(TargetError::BadPath));
        assert!(req("/a%41", Some("h")).is_ok());
    }

    #[test]
    fn asterisk_form() {
        let t = req("*", Some("h:8080")).unwrap();
        assert!(t.is_asterisk());
        assert_eq!(t.path_and_query(), "*");
        assert_eq!(t.route_path(), "/");
    }

    #[test]
    fn ipv4_forms() {
        let p = parse_ipv4_literal;
        assert_eq!(p("1.2.3.4"), Some(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(p("1.2.772"), Some(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(p("1.131844"), Some(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(p("0x7f.0.0.1"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(p("0177.0.0.1"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(p("4294967295"), Some(Ipv4Addr::new(255, 255, 255, 255)));
        assert_eq!(p("4294967296"), None);
        assert_eq!(p("1.2.3.256"), None);
        assert_eq!(p("08"), None);
    }
}
