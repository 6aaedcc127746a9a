//! `Vary` (RFC 9110 §12.5.5) and secondary-key matching (RFC 9111 §4.1).
//!
//! Field values are normalised before comparison so that requests differing
//! only in ways §4.1 allows still match: several field lines are combined
//! with ", ", whitespace next to `,` and `;` (outside quoted strings) and
//! empty list members are removed, and fields whose values are
//! case-insensitive (`Accept-Encoding`, `Accept-Charset`, `Accept-Language`)
//! are lowercased. In the weighted lists (those three and `Accept`, RFC 9110
//! §12.4.2) a weight is written one way (`q=1.0` is no weight, `Q=0.50` is
//! `q=0.5`) and members are put in order of weight, heaviest first: §4.1
//! allows reordering members whose order carries no meaning, and between
//! different weights it carries none. Members of equal weight keep their
//! order, since clients give it meaning there (`en, fr`: English first,
//! RFC 4647 §2.3).

use http::{header, HeaderMap, HeaderName};

use crate::field::{combined, is_token, list_members};

/// The selecting header fields of a stored response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Vary {
    /// `Vary: *` (or an unparseable member): never matches (§4.1).
    Star,
    /// The named request fields, lowercase, sorted and deduplicated. Empty
    /// when the response has no `Vary`.
    Fields(Vec<HeaderName>),
}

impl Vary {
    /// Parses and merges all `Vary` field lines of a response.
    pub fn from_headers(resp_headers: &HeaderMap) -> Vary {
        let Some(value) = combined(resp_headers, &header::VARY) else {
            return Vary::Fields(Vec::new());
        };
        let mut names = Vec::new();
        for member in list_members(&value) {
            if member == "*" || !is_token(member) {
                // A name we cannot read could select anything; matching
                // nothing is the only safe reading.
                return Vary::Star;
            }
            match HeaderName::from_bytes(member.as_bytes()) {
                Ok(n) => names.push(n),
                Err(_) => return Vary::Star,
            }
        }
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup();
        Vary::Fields(names)
    }

    /// True when the response does not vary at all.
    pub fn is_empty(&self) -> bool {
        matches!(self, Vary::Fields(f) if f.is_empty())
    }
}

/// True when a stored response whose `Vary` is `vary`, and whose request
/// carried `stored_req`, may be used for `new_req` (RFC 9111 §4.1). A field
/// absent in one request matches only if absent in the other.
pub fn vary_matches(vary: &Vary, stored_req: &HeaderMap, new_req: &HeaderMap) -> bool {
    match vary {
        Vary::Star => false,
        Vary::Fields(names) => names
            .iter()
            .all(|n| normalised(stored_req, n) == normalised(new_req, n)),
    }
}

/// A canonical string of the normalised selecting fields of `req`, so a
/// store can index variants: two requests that [`vary_matches`] considers
/// equal get the same key, and different keys mean no match. Empty when the
/// response does not vary. Bytes outside printable ASCII are %-escaped.
pub fn variant_key(vary: &Vary, req: &HeaderMap) -> String {
    let names = match vary {
        Vary::Star => return "*".to_owned(),
        Vary::Fields(names) => names,
    };
    let mut key = String::new();
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            key.push('\n');
        }
        key.push_str(name.as_str());
        match normalised(req, name) {
            None => key.push('!'),
            Some(value) => {
                key.push(':');
                for b in value {
                    if (0x21..=0x7e).contains(&b) && b != b'%' {
                        key.push(char::from(b));
                    } else {
                        key.push_str(&format!("%{b:02X}"));
                    }
                }
            }
        }
    }
    key
}

/// Fields whose members carry a weight (RFC 9110 §12.4.2).
fn weighted(name: &HeaderName) -> bool {
    *name == header::ACCEPT || case_insensitive(name)
}

/// A `qvalue` (RFC 9110 §12.4.2) in thousandths, or `None` when malformed.
fn qvalue(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|b| *b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &[][..]),
    };
    if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int[0] {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// A member's weight in thousandths, with its weight parameter rewritten in one canonical
/// form (dropped when it is 1). A member with a quoted string or a malformed weight is left
/// as it is, weighing 1.
fn canonical_weight(member: &mut Vec<u8>) -> u16 {
    if member.contains(&b'"') {
        return 1000;
    }
    let text = member.clone();
    let mut params = text.split(|b| *b == b';');
    let mut out: Vec<u8> = params.next().unwrap_or_default().to_vec();
    let mut weight = 1000;
    for p in params {
        let q = match p {
            [b'q' | b'Q', b'=', v @ ..] => qvalue(v),
            _ => None,
        };
        match q {
            Some(w) => {
                weight = w;
                if w < 1000 {
                    let digits = format!("{:03}", w);
                    out.extend_from_slice(b";q=0.");
                    out.extend_from_slice(digits.trim_end_matches('0').as_bytes());
                    if w == 0 {
                        out.truncate(out.len() - 1);
                    }
                }
            }
            None => {
                out.push(b';');
                out.extend_from_slice(p);
            }
        }
    }
    *member = out;
    weight
}

fn case_insensitive(name: &HeaderName) -> bool {
    *name == header::ACCEPT_ENCODING
        || *name == header::ACCEPT_CHARSET
        || *name == header::ACCEPT_LANGUAGE
}

/// The normalised value of `name` in `req`, or `None` when absent.
pub fn normalised(req: &HeaderMap, name: &HeaderName) -> Option<Vec<u8>> {
    let mut lines = req.get_all(name).iter().peekable();
    lines.peek()?;
    let mut joined: Vec<u8> = Vec::new();
    for (i, line) in lines.enumerate() {
        if i > 0 {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(line.as_bytes());
    }
    let lower = case_insensitive(name);
    let mut members: Vec<Vec<u8>> = Vec::new();
    let mut current: Vec<u8> = Vec::new();
    let (mut in_quotes, mut escaped, mut after_semicolon) = (false, false, false);
    for b in joined {
        if in_quotes {
            current.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_quotes = false;
            }
            continue;
        }
        match b {
            b',' => {
                finish_member(&mut members, &mut current);
                after_semicolon = false;
            }
            b' ' | b'\t' if current.is_empty() || after_semicolon => {}
            b';' => {
                trim_trailing_ws(&mut current);
                current.push(b';');
                after_semicolon = true;
            }
            _ => {
                after_semicolon = false;
                if b == b'"' {
                    in_quotes = true;
                }
                current.push(if lower { b.to_ascii_lowercase() } else { b });
            }
        }
    }
    finish_member(&mut members, &mut current);
    if weighted(name) {
        let mut w: Vec<(u16, Vec<u8>)> = members
            .into_iter()
            .map(|mut m| (canonical_weight(&mut m), m))
            .collect();
        // Stable: members of equal weight keep their order.
        w.sort_by_key(|m| std::cmp::Reverse(m.0));
        members = w.into_iter().map(|(_, m)| m).collect();
    }
    Some(members.join(&b","[..]))
}

fn trim_trailing_ws(v: &mut Vec<u8>) {
    while matches!(v.last(), Some(b' ' | b'\t')) {
        v.pop();
    }
}

fn finish_member(members: &mut Vec<Vec<u8>>, current: &mut Vec<u8>) {
    trim_trailing_ws(current);
    if !current.is_empty() {
        members.push(std::mem::take(current));
    }
    current.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn h(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (n, v) in pairs {
            m.append(
                HeaderName::from_bytes(n.as_bytes()).expect("name"),
                HeaderValue::from_bytes(v).expect("value"),
            );
        }
        m
    }

    fn vary(v: &'static str) -> Vary {
        let mut m = HeaderMap::new();
        m.insert(header::VARY, HeaderValue::from_static(v));
        Vary::from_headers(&m)
    }

    #[test]
    fn vary_star_never_matches_9111_4_1() {
        assert_eq!(vary("*"), Vary::Star);
        assert_eq!(vary("Accept, *"), Vary::Star);
        assert!(!vary_matches(&Vary::Star, &h(&[]), &h(&[])));
    }

    #[test]
    fn vary_names_are_lowercased_merged_and_deduplicated_9110_12_5_5() {
        let mut m = HeaderMap::new();
        m.append(
            header::VARY,
            HeaderValue::from_static("Accept-Encoding, User-Agent"),
        );
        m.append(
            header::VARY,
            HeaderValue::from_static("accept-encoding,,Accept"),
        );
        assert_eq!(
            Vary::from_headers(&m),
            Vary::Fields(vec![
                header::ACCEPT,
                header::ACCEPT_ENCODING,
                header::USER_AGENT
            ])
        );
        assert!(Vary::from_headers(&HeaderMap::new()).is_empty());
        assert!(vary(" , ").is_empty());
    }

    #[test]
    fn unparseable_vary_member_is_treated_as_star() {
        assert_eq!(vary("accept, bad name"), Vary::Star);
        assert_eq!(vary("\"quoted\""), Vary::Star);
    }

    #[test]
    fn no_vary_always_matches_9111_4_1() {
        let v = vary("");
        assert!(vary_matches(
            &v,
            &h(&[("accept", b"a")]),
            &h(&[("accept", b"b")])
        ));
    }

    #[test]
    fn selecting_fields_must_match_9111_4_1() {
        let v = vary("Accept-Encoding");
        let gzip = h(&[("accept-encoding", b"gzip")]);
        let br = h(&[("accept-encoding", b"br")]);
        assert!(vary_matches(&v, &gzip, &gzip));
        assert!(!vary_matches(&v, &gzip, &br));
    }

    #[test]
    fn absent_field_matches_only_absent_field_9111_4_1() {
        let v = vary("accept-language");
        let none = h(&[]);
        let empty = h(&[("accept-language", b"")]);
        assert!(vary_matches(&v, &none, &none));
        assert!(!vary_matches(&v, &none, &empty));
        assert!(!vary_matches(&v, &none, &h(&[("accept-language", b"en")])));
    }

    #[test]
    fn whitespace_and_line_combination_are_normalised_9111_4_1() {
        let v = vary("Accept-Encoding, Accept");
        let a = h(&[
            ("accept-encoding", b"gzip,  deflate ; q=0.5"),
            ("accept", b"text/html"),
        ]);
        let b = h(&[
            ("accept-encoding", b" gzip"),
            ("accept-encoding", b"deflate;q=0.5 "),
            ("accept", b"text/html"),
        ]);
        assert!(vary_matches(&v, &a, &b));
        assert_eq!(variant_key(&v, &a), variant_key(&v, &b));
    }

    #[test]
    fn case_insensitive_fields_are_case_normalised_9111_4_1() {
        let v = vary("Accept-Encoding");
        assert!(vary_matches(
            &v,
            &h(&[("accept-encoding", b"GZIP, Br")]),
            &h(&[("accept-encoding", b"gzip, br")])
        ));
        // Members of equal weight keep their order (RFC 4647 §2.3 gives it meaning).
        assert!(!vary_matches(
            &v,
            &h(&[("accept-encoding", b"br, gzip")]),
            &h(&[("accept-encoding", b"gzip, br")])
        ));
        // Other fields stay case-sensitive.
        let ua = vary("User-Agent");
        assert!(!vary_matches(
            &ua,
            &h(&[("user-agent", b"A")]),
            &h(&[("user-agent", b"a")])
        ));
    }

    #[test]
    fn weighted_lists_are_ordered_by_weight_9111_4_1() {
        let v = vary("Accept-Language");
        let al = |s: &'static [u8]| h(&[("accept-language", s)]);
        let a = al(b"en-GB, fr;q=0.5, de;q=0.3");
        for same in [
            &b"fr;q=0.50 , EN-gb,de;Q=0.300"[..],
            b"de;q=0.3,en-gb;q=1.0,fr;q=0.5",
            b"de;q=0.3, fr;q=0.5, en-gb;q=1",
        ] {
            let b = h(&[("accept-language", same)]);
            assert!(
                vary_matches(&v, &a, &b),
                "{:?}",
                String::from_utf8_lossy(same)
            );
            assert_eq!(variant_key(&v, &a), variant_key(&v, &b));
        }
        // Equal weights keep their order; different weights are different requests.
        assert!(!vary_matches(&v, &al(b"en, fr"), &al(b"fr, en")));
        assert!(!vary_matches(&v, &a, &al(b"en-gb, fr;q=0.4, de;q=0.3")));
        assert!(vary_matches(&v, &al(b"*;q=0, en"), &al(b"en, *;q=0.000")));
        // Media types keep their case and their parameters; only the weight moves.
        let acc = vary("Accept");
        assert!(vary_matches(
            &acc,
            &h(&[("accept", b"text/html;level=1;q=0.5, image/png")]),
            &h(&[("accept", b"image/png;Q=1, text/html;level=1;q=0.500")])
        ));
        assert!(!vary_matches(
            &acc,
            &h(&[("accept", b"text/html;level=1")]),
            &h(&[("accept", b"text/html;level=2")])
        ));
        // A malformed weight is kept as written, never guessed.
        assert!(!vary_matches(&v, &al(b"en;q=2"), &al(b"en")));
        assert!(!vary_matches(&v, &al(b"en;q=0.5x"), &al(b"en;q=0.5")));
    }

    #[test]
    fn quoted_strings_are_not_normalised() {
        let v = vary("X-Custom");
        assert!(!vary_matches(
            &v,
            &h(&[("x-custom", b"a=\"x , y\"")]),
            &h(&[("x-custom", b"a=\"x,y\"")])
        ));
        // Unbalanced quotes do not panic.
        assert!(vary_matches(
            &v,
            &h(&[("x-custom", b"\"a\\")]),
            &h(&[("x-custom", b"\"a\\")])
        ));
    }

    #[test]
    fn variant_key_distinguishes_absent_empty_and_values() {
        let v = vary("accept-encoding, accept-language");
        let absent = variant_key(&v, &h(&[]));
        let empty = variant_key(&v, &h(&[("accept-encoding", b"")]));
        let gzip = variant_key(&v, &h(&[("accept-encoding", b"gzip")]));
        assert_eq!(absent, "accept-encoding!\naccept-language!");
        assert_eq!(empty, "accept-encoding:\naccept-language!");
        assert_eq!(gzip, "accept-encoding:gzip\naccept-language!");
        assert_eq!(variant_key(&vary(""), &h(&[("accept", b"x")])), "");
    }

    #[test]
    fn variant_key_escapes_non_ascii_without_collisions() {
        let v = vary("x-a");
        let a = variant_key(&v, &h(&[("x-a", b"\xff")]));
        let b = variant_key(&v, &h(&[("x-a", b"\xfe")]));
        let c = variant_key(&v, &h(&[("x-a", b"%FF")]));
        assert_eq!(a, "x-a:%FF");
        assert_ne!(a, b);
        assert_ne!(a, c);
        let spaced = variant_key(&v, &h(&[("x-a", b"a b")]));
        assert_eq!(spaced, "x-a:a%20b");
    }
}
