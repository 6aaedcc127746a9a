//! Parsing a client's request head and deciding its framing (RFC 9112 §2–§6).
//!
//! This is where request smuggling is stopped: a head whose message length is ambiguous
//! (Content-Length with Transfer-Encoding, differing Content-Lengths, a Transfer-Encoding
//! that does not end in chunked, Transfer-Encoding in HTTP/1.0) or that uses obs-fold is
//! refused with 400 before anything reaches an origin.

use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, Version};

/// Limits on what a client may send in one head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    pub max_head_bytes: usize,
    pub max_headers: usize,
}

impl Default for HeadLimits {
    fn default() -> Self {
        HeadLimits {
            max_head_bytes: 64 * 1024,
            max_headers: 100,
        }
    }
}

/// How the request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// A parsed, validated request head.
#[derive(Debug)]
pub struct RequestHead {
    pub method: Method,
    pub target: Uri,
    pub version: Version,
    pub headers: HeaderMap,
    pub framing: Framing,
    /// Whether the client wants the connection kept open after this exchange.
    pub keep_alive: bool,
    pub expect_continue: bool,
}

/// Why a head was refused; each maps to a status and a short reason for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("request head too large")]
    TooLarge,
    #[error("too many header fields")]
    TooManyHeaders,
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("ambiguous message length: {0}")]
    Framing(&'static str),
    #[error("unsupported transfer coding")]
    UnsupportedCoding,
    #[error("unsupported HTTP version")]
    Version,
}

impl HeadError {
    /// The status to answer with.
    pub fn status(self) -> StatusCode {
        match self {
            HeadError::TooLarge | HeadError::TooManyHeaders => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            HeadError::UnsupportedCoding => StatusCode::NOT_IMPLEMENTED,
            HeadError::Version => StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            HeadError::Malformed(_) | HeadError::Framing(_) => StatusCode::BAD_REQUEST,
        }
    }
}

const MAX_HEADERS_CAP: usize = 256;

/// The legacy field browsers send to proxies in place of `Connection`.
const PROXY_CONNECTION: &str = "proxy-connection";

/// Parses one request head from the front of `buf`, removing it. `Ok(None)` means more
/// bytes are needed.
pub fn parse(buf: &mut BytesMut, limits: HeadLimits) -> Result<Option<RequestHead>, HeadError> {
    // Uninitialised slots: filling 256 empty headers before every parse cost more than
    // the parse of a short head.
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS_CAP];
    let max = limits.max_headers.clamp(1, MAX_HEADERS_CAP);
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut slots[..max]) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > limits.max_head_bytes {
                return Err(HeadError::TooLarge);
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(httparse::Error::Version) => {
            // 505 only for a well-formed version trove does not speak (HTTP/2.0 over this
            // framing, say); anything else in that place is a malformed request line.
            let line = buf[..].split(|b| *b == b'\n').next().unwrap_or(&[]);
            let version = line.rsplit(|b| *b == b' ').next().unwrap_or(&[]);
            let version = version.strip_suffix(b"\r").unwrap_or(version);
            let well_formed = version.len() == 8
                && version.starts_with(b"HTTP/")
                && version[5].is_ascii_digit()
                && version[6] == b'.'
                && version[7].is_ascii_digit();
            return Err(if well_formed {
                HeadError::Version
            } else {
                HeadError::Malformed("invalid HTTP version")
            });
        }
        Err(httparse::Error::HeaderName) | Err(httparse::Error::HeaderValue) => {
            // Includes obs-fold (a line starting with whitespace), which RFC 9112 §5.2
            // lets a server reject with 400.
            return Err(HeadError::Malformed("invalid header field"));
        }
        Err(_) => return Err(HeadError::Malformed("invalid request line")),
    };
    if len > limits.max_head_bytes {
        return Err(HeadError::TooLarge);
    }
    let method = Method::from_bytes(req.method.unwrap_or("").as_bytes())
        .map_err(|_| HeadError::Malformed("invalid method"))?;
    let version = match req.version {
        Some(1) => Version::HTTP_11,
        Some(0) => Version::HTTP_10,
        _ => return Err(HeadError::Version),
    };
    let path = req.path.unwrap_or("");
    let target: Uri = if method == Method::CONNECT {
        // authority-form: host:port only.
        let a: http::uri::Authority = path
            .parse()
            .map_err(|_| HeadError::Malformed("invalid CONNECT target"))?;
        if a.port_u16().is_none() {
            return Err(HeadError::Malformed("CONNECT target needs a port"));
        }
        Uri::from(a)
    } else {
        let t: Uri = path
            .parse()
            .map_err(|_| HeadError::Malformed("invalid request target"))?;
        if t.scheme().is_none()
            && !path.starts_with('/')
            && !(path == "*" && method == Method::OPTIONS)
        {
            return Err(HeadError::Malformed("invalid request target"));
        }
        t
    };
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    // The fields judged below, noted as the map is built (a name compares as an enum here;
    // a lookup in the map would hash it again).
    let mut hosts = 0;
    let (mut te, mut cl, mut expect, mut connection) = (false, false, false, false);
    for h in req.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| HeadError::Malformed("invalid header name"))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| HeadError::Malformed("invalid header value"))?;
        if name == HOST {
            hosts += 1;
        } else if name == TRANSFER_ENCODING {
            te = true;
        } else if name == CONTENT_LENGTH {
            cl = true;
        } else if name == EXPECT {
            expect = true;
        } else if name == CONNECTION || name.as_str() == PROXY_CONNECTION {
            connection = true;
        }
        headers.append(name, value);
    }
    // Advanced past, not split off: the buffer stays one unshared allocation (a split
    // would allocate a reference count for its halves on every request).
    bytes::Buf::advance(buf, len);

    let framing = framing(version, &mut headers, te, cl)?;
    if hosts > 1 || (version == Version::HTTP_11 && hosts == 0) {
        return Err(HeadError::Malformed("exactly one Host field is required"));
    }
    let keep_alive = if connection {
        wants_keep_alive(version, &headers)
    } else {
        version == Version::HTTP_11
    };
    let expect_continue = expect
        && version == Version::HTTP_11
        && headers
            .get(EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    Ok(Some(RequestHead {
        method,
        target,
        version,
        headers,
        framing,
        keep_alive,
        expect_continue,
    }))
}

/// RFC 9112 §6.3, strictly: anything ambiguous is an error rather than a guess. A valid
/// `Content-Length` is left in `headers` as one canonical value (`3, 3` and `003` become
/// `3`), so what goes on to the origin is what was judged here.
/// `has_te` and `has_cl` say whether those fields are present.
fn framing(
    version: Version,
    headers: &mut HeaderMap,
    has_te: bool,
    has_cl: bool,
) -> Result<Framing, HeadError> {
    if has_te {
        if version == Version::HTTP_10 {
            return Err(HeadError::Framing("Transfer-Encoding in HTTP/1.0"));
        }
        if has_cl {
            return Err(HeadError::Framing(
                "both Content-Length and Transfer-Encoding",
            ));
        }
        let mut codings = Vec::new();
        for v in headers.get_all(TRANSFER_ENCODING) {
            let s = v
                .to_str()
                .map_err(|_| HeadError::Framing("invalid Transfer-Encoding"))?;
            for c in s.split(',') {
                let c = c.trim();
                if !c.is_empty() {
                    codings.push(c.to_ascii_lowercase());
                }
            }
        }
        match codings.as_slice() {
            [only] if only == "chunked" => Ok(Framing::Chunked),
            [] => Err(HeadError::Framing("empty Transfer-Encoding")),
            [.., last] if last == "chunked" => {
                if codings.iter().filter(|c| *c == "chunked").count() > 1 {
                    Err(HeadError::Framing("chunked applied twice"))
                } else {
                    Err(HeadError::UnsupportedCoding)
                }
            }
            _ => Err(HeadError::Framing(
                "Transfer-Encoding does not end in chunked",
            )),
        }
    } else if has_cl {
        let len = trove_http::content_length::parse_all(headers.get_all(CONTENT_LENGTH))
            .map_err(|e| HeadError::Framing(e.as_str()))?;
        let n = len.unwrap_or(0);
        headers.insert(CONTENT_LENGTH, HeaderValue::from(n));
        Ok(if n == 0 {
            Framing::None
        } else {
            Framing::Length(n)
        })
    } else {
        Ok(Framing::None)
    }
}

/// HTTP/1.1 persists unless told to close; HTTP/1.0 only with `Connection: keep-alive` or
/// the legacy `Proxy-Connection: keep-alive` that browsers send to proxies.
fn wants_keep_alive(version: Version, headers: &HeaderMap) -> bool {
    let proxy_connection = HeaderName::from_static(PROXY_CONNECTION);
    let mut close = false;
    let mut keep = false;
    for v in headers
        .get_all(CONNECTION)
        .iter()
        .chain(headers.get_all(&proxy_connection).iter())
    {
        for tok in v.to_str().unwrap_or("").split(',') {
            let tok = tok.trim();
            if tok.eq_ignore_ascii_case("close") {
                close = true;
            } else if tok.eq_ignore_ascii_case("keep-alive") {
                keep = true;
            }
        }
    }
    if close {
        return false;
    }
    version == Version::HTTP_11 || keep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Option<RequestHead>, HeadError> {
        let mut b = BytesMut::from(s);
        parse(&mut b, HeadLimits::default())
    }

    #[test]
    fn simple_get_keeps_alive() {
        let h = p("GET /a HTTP/1.1\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.method, Method::GET);
        assert!(h.keep_alive);
        assert_eq!(h.framing, Framing::None);
    }

    #[test]
    fn bad_versions_are_400_and_unknown_ones_505() {
        assert_eq!(
            p("GET / HTTP/2.0\r\nHost: x\r\n\r\n").unwrap_err().status(),
            StatusCode::HTTP_VERSION_NOT_SUPPORTED
        );
        assert_eq!(
            p("GET / LINE\r\n\r\n").unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn partial_head_needs_more() {
        assert!(p("GET /a HTTP/1.1\r\nHost: x\r\n").unwrap().is_none());
    }

    #[test]
    fn http10_keep_alive_via_proxy_connection() {
        let h = p("GET http://a/ HTTP/1.0\r\nProxy-Connection: keep-alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.keep_alive);
        let h = p("GET http://a/ HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!h.keep_alive);
    }

    /// The fields noted while the map is built decide as the map would: in any case, and
    /// for `Connection` and `Proxy-Connection` alike.
    #[test]
    fn connection_and_expect_are_read_in_any_case() {
        let h = p("GET /a HTTP/1.1\r\nhost: x\r\nCONNECTION: Close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive);
        let h = p("GET http://a/ HTTP/1.1\r\nHost: a\r\nPROXY-CONNECTION: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive);
        let h = p("GET /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.keep_alive);
        let h =
            p("POST /a HTTP/1.1\r\nHOST: x\r\nexpect: 100-Continue\r\ncontent-length: 3\r\n\r\n")
                .unwrap()
                .unwrap();
        assert!(h.expect_continue);
        assert_eq!(h.framing, Framing::Length(3));
        let h = p("POST /a HTTP/1.0\r\nexpect: 100-continue\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.expect_continue, "HTTP/1.0 has no 100-continue");
    }

    /// The header slots are left uninitialised: the limit still holds at its edge.
    #[test]
    fn header_count_limit_holds_at_its_edge() {
        let limits = HeadLimits {
            max_head_bytes: 64 * 1024,
            max_headers: 5,
        };
        let head = |n: usize| {
            let mut s = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
            for i in 1..n {
                s.push_str(&format!("X-{i}: {i}\r\n"));
            }
            s.push_str("\r\n");
            BytesMut::from(s.as_str())
        };
        let h = parse(&mut head(5), limits).unwrap().unwrap();
        assert_eq!(h.headers.len(), 5);
        assert_eq!(h.headers["x-4"], "4");
        assert_eq!(
            parse(&mut head(6), limits).unwrap_err(),
            HeadError::TooManyHeaders
        );
        // And the cap of 256 slots, whatever the setting.
        let wide = HeadLimits {
            max_head_bytes: 64 * 1024,
            max_headers: 10_000,
        };
        assert!(parse(&mut head(256), wide).unwrap().is_some());
        assert_eq!(
            parse(&mut head(257), wide).unwrap_err(),
            HeadError::TooManyHeaders
        );
    }

    #[test]
    fn cl_and_te_together_are_rejected_9112_6_3() {
        let e = p(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn differing_content_lengths_are_rejected() {
        assert!(
            p("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n")
                .is_err()
        );
        assert!(p("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 4\r\n\r\n").is_err());
        assert!(p("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\n").is_err());
        let h = p("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Length(3));
    }

    /// RFC 9110 §8.6: a list of one value, repeated fields and leading zeros are read as the
    /// one length and kept as its canonical form (what is forwarded); a length past 2^63 − 1
    /// is refused.
    #[test]
    fn content_length_is_normalised_or_refused_9110_8_6() {
        for cl in [
            "Content-Length: 3, 3",
            "Content-Length: 000003",
            "Content-Length: 3\r\nContent-Length: 3",
        ] {
            let h = p(&format!("POST / HTTP/1.1\r\nHost: x\r\n{cl}\r\n\r\n"))
                .unwrap()
                .unwrap();
            assert_eq!(h.framing, Framing::Length(3), "{cl}");
            let values: Vec<_> = h.headers.get_all(CONTENT_LENGTH).iter().collect();
            assert_eq!(values, ["3"], "{cl}");
        }
        let h = p("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 00\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::None);
        assert_eq!(h.headers[CONTENT_LENGTH], "0");
        for big in [
            "9223372036854775808",
            "18446744073709551615",
            "99999999999999999999",
        ] {
            let e = p(&format!(
                "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {big}\r\n\r\n"
            ))
            .unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{big}");
        }
    }

    #[test]
    fn obs_fold_is_rejected_9112_5_2() {
        assert!(p("GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n").is_err());
    }

    #[test]
    fn te_not_ending_in_chunked_is_rejected() {
        assert!(
            p("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n").is_err()
        );
        assert!(p("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n").is_err());
    }

    #[test]
    fn missing_or_double_host_is_rejected_9112_3_2() {
        assert!(p("GET / HTTP/1.1\r\n\r\n").is_err());
        assert!(p("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").is_err());
    }

    #[test]
    fn oversized_head_is_refused() {
        let big = format!("GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n", "a".repeat(70_000));
        assert_eq!(p(&big).unwrap_err(), HeadError::TooLarge);
    }

    /// Mutated requests never make the parser panic (a stand-in for a fuzz target: seeded,
    /// so a failure reproduces).
    #[test]
    fn mutated_heads_never_panic() {
        let seeds: [&[u8]; 4] = [
            b"GET http://a/b?c HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
            b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
        ];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let alphabet = b" :\r\n\t,;=/0123456789abcdefxyzHTP.\x00\x7f\xff";
        for i in 0..20_000 {
            let mut m = seeds[i % seeds.len()].to_vec();
            for _ in 0..(next() % 6 + 1) {
                let pos = (next() as usize) % (m.len() + 1);
                let c = alphabet[(next() as usize) % alphabet.len()];
                match next() % 3 {
                    0 if pos < m.len() => m[pos] = c,
                    1 => m.insert(pos, c),
                    _ if pos < m.len() => {
                        m.remove(pos);
                    }
                    _ => {}
                }
            }
            let mut b = BytesMut::from(&m[..]);
            let _ = parse(&mut b, HeadLimits::default());
        }
    }

    #[test]
    fn connect_needs_authority_form() {
        let h = p("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.target.port_u16(), Some(443));
        assert!(p("CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n").is_err());
    }
}
