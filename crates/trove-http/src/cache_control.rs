//! `Cache-Control` (RFC 9111 §5.2) parsed into one struct holding both the
//! request and the response directives, plus the HTTP/1.0 `Pragma: no-cache`
//! fallback for requests (§5.4) and the strict parse of targeted fields
//! (RFC 9213 §2.2).
//!
//! The parser never fails: unknown directives are ignored (§5.2.3), and a
//! known directive with a bad argument is resolved in the direction that
//! caches less (§4.2.1 "responses that have invalid freshness information
//! ... to be stale"). `malformed` records that this happened.

use http::{header, HeaderMap, HeaderName};

use std::borrow::Cow;

use crate::field::{combined, is_token, list_members, parse_delta_seconds, split_list, unquote};

/// The longest directive name [`CacheControl::apply`] knows (`stale-while-revalidate`).
const DIRECTIVE_MAX: usize = 22;
use crate::sf;

/// A directive that is either absent, unqualified, or qualified by a list of
/// field names (`no-cache="Set-Cookie"`, `private="X-User"`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FieldList {
    /// The directive does not appear.
    #[default]
    Absent,
    /// The directive appears without arguments: it applies to the whole response.
    All,
    /// The directive names only these (lowercased) fields.
    Fields(Vec<HeaderName>),
}

impl FieldList {
    /// True for `All` and `Fields`.
    pub fn is_present(&self) -> bool {
        !matches!(self, FieldList::Absent)
    }

    fn add_all(&mut self) {
        *self = FieldList::All;
    }

    fn add_fields(&mut self, names: Vec<HeaderName>) {
        match self {
            FieldList::All => {}
            FieldList::Fields(existing) => {
                for n in names {
                    if !existing.contains(&n) {
                        existing.push(n);
                    }
                }
            }
            FieldList::Absent => *self = FieldList::Fields(names),
        }
    }

    /// Adds a qualified argument; arguments that are not a clean list of
    /// field names widen the directive to `All`, the safe reading.
    fn add_argument(&mut self, arg: &str) {
        let members = split_list(arg);
        let names: Option<Vec<HeaderName>> = members
            .iter()
            .map(|m| {
                if is_token(m) {
                    HeaderName::from_bytes(m.as_bytes()).ok()
                } else {
                    None
                }
            })
            .collect();
        match names {
            Some(names) if !names.is_empty() => self.add_fields(names),
            _ => self.add_all(),
        }
    }
}

/// Parsed cache directives. Durations are whole seconds, saturated at
/// 2^31 (RFC 9111 §1.2.2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `max-age` (§5.2.1.1 request, §5.2.2.1 response). A malformed or
    /// conflicting duplicate value is `Some(0)`: the response is stale.
    pub max_age: Option<u64>,
    /// `s-maxage` (§5.2.2.10), same invalid-value rule as `max_age`.
    pub s_maxage: Option<u64>,
    /// `no-store` (§5.2.1.5, §5.2.2.5).
    pub no_store: bool,
    /// `no-cache` (§5.2.1.4 request, §5.2.2.4 response, optionally qualified).
    pub no_cache: FieldList,
    /// `private` (§5.2.2.7, optionally qualified).
    pub private: FieldList,
    /// `public` (§5.2.2.9).
    pub public: bool,
    /// `must-revalidate` (§5.2.2.2).
    pub must_revalidate: bool,
    /// `proxy-revalidate` (§5.2.2.8).
    pub proxy_revalidate: bool,
    /// `must-understand` (§5.2.2.3).
    pub must_understand: bool,
    /// `no-transform` (§5.2.1.6, §5.2.2.6).
    pub no_transform: bool,
    /// `immutable` (RFC 8246).
    pub immutable: bool,
    /// `stale-while-revalidate` (RFC 5861 §3); malformed values are ignored.
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error` (RFC 5861 §4), in a request or a response.
    pub stale_if_error: Option<u64>,
    /// `max-stale` request directive (§5.2.1.2): `Some(None)` accepts any
    /// staleness, `Some(Some(n))` at most `n` seconds.
    pub max_stale: Option<Option<u64>>,
    /// `min-fresh` request directive (§5.2.1.3).
    pub min_fresh: Option<u64>,
    /// `only-if-cached` request directive (§5.2.1.7).
    pub only_if_cached: bool,
    /// True when a known directive had an argument it should not have, or
    /// lacked one it needs; the struct already reflects the safe reading.
    pub malformed: bool,
}

/// How a second occurrence of a delta-seconds directive combines with the first.
#[derive(Clone, Copy)]
enum Duplicate {
    /// Conflicting values mean invalid freshness: treat as 0 (stale).
    ConflictIsZero,
    /// Keep the smaller value (less staleness allowed).
    Min,
    /// Keep the larger value (more freshness demanded).
    Max,
}

impl CacheControl {
    /// Parses a Cache-Control field value (already combined from all lines).
    pub fn parse(value: &str) -> CacheControl {
        let mut cc = CacheControl::default();
        for member in list_members(value) {
            let (name, arg) = match member.split_once('=') {
                Some((n, a)) => (crate::field::trim_ows(n), Some(crate::field::trim_ows(a))),
                None => (member, None),
            };
            let arg = match arg.map(unquote) {
                Some(Some(a)) => Some(a),
                Some(None) => {
                    cc.malformed = true;
                    Some(Cow::Borrowed(""))
                }
                None => None,
            };
            // Directive names are matched case-insensitively; every known one is short, so
            // a longer name is unknown and ignored (§5.2.3) without being lowercased.
            let mut lower = [0u8; DIRECTIVE_MAX];
            let Some(buf) = lower.get_mut(..name.len()) else {
                continue;
            };
            buf.copy_from_slice(name.as_bytes());
            buf.make_ascii_lowercase();
            // Lowercasing ASCII letters keeps UTF-8 valid.
            let name = std::str::from_utf8(buf).unwrap_or("");
            cc.apply(name, arg.as_deref());
        }
        cc
    }

    /// Parses every field line of `name` as one Cache-Control value.
    /// An absent field gives the default (no directives).
    pub fn from_headers(headers: &HeaderMap, name: &HeaderName) -> CacheControl {
        let mut lines = headers.get_all(name).iter();
        let Some(first) = lines.next() else {
            return CacheControl::default();
        };
        if lines.next().is_none() {
            return CacheControl::parse_line(first.as_bytes());
        }
        combined(headers, name)
            .map(|v| CacheControl::parse(&v))
            .unwrap_or_default()
    }

    /// [`CacheControl::parse`] of one field line's bytes, remembered: a response's
    /// directives are read several times while it is judged (storable? how fresh? which
    /// fast path?), and an origin sends the same value on response after response, so the
    /// last value parsed on this thread is kept with its result. The result depends on
    /// the bytes alone, and the bytes are compared in full.
    fn parse_line(bytes: &[u8]) -> CacheControl {
        /// Longer values are parsed each time (nothing long is copied to be remembered).
        const REMEMBERED: usize = 128;
        thread_local! {
            static LAST: std::cell::RefCell<(Vec<u8>, CacheControl)> =
                std::cell::RefCell::new((Vec::new(), CacheControl::default()));
        }
        if bytes.len() > REMEMBERED || bytes.is_empty() {
            return CacheControl::parse(&String::from_utf8_lossy(bytes));
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            if last.0 != bytes {
                last.1 = CacheControl::parse(&String::from_utf8_lossy(bytes));
                last.0.clear();
                last.0.extend_from_slice(bytes);
            }
            last.1.clone()
        })
    }

    /// Request directives: `Cache-Control`, or when that field is absent,
    /// `Pragma: no-cache` read as `Cache-Control: no-cache` (RFC 9111 §5.4;
    /// HTTP/1.0 clients send only Pragma).
    pub fn from_request(headers: &HeaderMap) -> CacheControl {
        if headers.contains_key(header::CACHE_CONTROL) {
            return CacheControl::from_headers(headers, &header::CACHE_CONTROL);
        }
        let mut cc = CacheControl::default();
        if let Some(pragma) = combined(headers, &header::PRAGMA) {
            if split_list(&pragma)
                .iter()
                .any(|d| d.eq_ignore_ascii_case("no-cache"))
            {
                cc.no_cache = FieldList::All;
            }
        }
        cc
    }

    /// Parses a targeted field (RFC 9213 §2.2) strictly as a Structured Field
    /// Dictionary. `None` when the field is empty or does not parse: the
    /// caller must then behave as if the field were absent. Directives whose
    /// value has the wrong type are ignored, as §2.2 asks.
    pub fn parse_targeted(value: &str) -> Option<CacheControl> {
        let members = sf::parse_dictionary(value)?;
        let mut cc = CacheControl::default();
        for (key, item) in members {
            let is_number = matches!(item, sf::Item::Integer(_));
            let arg = match item {
                sf::Item::Boolean(true) => None,
                sf::Item::Integer(n) if n >= 0 => Some(n.to_string()),
                sf::Item::String(s) => Some(s),
                sf::Item::Token(t) => Some(t),
                _ => {
                    cc.malformed = true;
                    continue;
                }
            };
            let wants_number = matches!(
                key.as_str(),
                "max-age" | "s-maxage" | "stale-while-revalidate" | "stale-if-error"
            );
            let takes_fields = matches!(key.as_str(), "no-cache" | "private");
            let ok = if wants_number {
                is_number
            } else if takes_fields {
                !is_number
            } else {
                arg.is_none()
            };
            if ok {
                cc.apply(&key, arg.as_deref());
            } else {
                cc.malformed = true;
            }
        }
        Some(cc)
    }

    /// Targeted field `name` from the headers, parsed strictly; `None` when
    /// absent, empty or invalid.
    pub fn targeted_from_headers(headers: &HeaderMap, name: &HeaderName) -> Option<CacheControl> {
        CacheControl::parse_targeted(&combined(headers, name)?)
    }

    /// True when the response carries an explicit expiration directive
    /// (`max-age` or, for a shared cache, `s-maxage`).
    pub fn has_explicit_lifetime(&self, shared: bool) -> bool {
        self.max_age.is_some() || (shared && self.s_maxage.is_some())
    }

    /// True when a stored response must not be served stale by this cache
    /// without validation: `must-revalidate` (§5.2.2.2), and in a shared
    /// cache `proxy-revalidate` (§5.2.2.8) and `s-maxage`, which implies it
    /// (§5.2.2.10).
    pub fn forbids_stale(&self, shared: bool) -> bool {
        self.must_revalidate || (shared && (self.proxy_revalidate || self.s_maxage.is_some()))
    }

    fn apply(&mut self, name: &str, arg: Option<&str>) {
        match name {
            "max-age" => {
                let v = self.max_age;
                self.max_age = Some(self.delta(v, arg, Duplicate::ConflictIsZero).unwrap_or(0));
            }
            "s-maxage" => {
                let v = self.s_maxage;
                self.s_maxage = Some(self.delta(v, arg, Duplicate::ConflictIsZero).unwrap_or(0));
            }
            "stale-while-revalidate" => {
                let v = self.stale_while_revalidate;
                self.stale_while_revalidate = self.delta(v, arg, Duplicate::Min);
            }
            "stale-if-error" => {
                let v = self.stale_if_error;
                self.stale_if_error = self.delta(v, arg, Duplicate::Min);
            }
            "min-fresh" => {
                let v = self.min_fresh;
                self.min_fresh = self.delta(v, arg, Duplicate::Max);
            }
            "max-stale" => match arg {
                None => {
                    if self.max_stale.is_none() {
                        self.max_stale = Some(None);
                    }
                }
                Some(a) => match (parse_delta_seconds(a), self.max_stale) {
                    (None, _) => self.malformed = true,
                    (Some(n), Some(Some(m))) => self.max_stale = Some(Some(n.min(m))),
                    (Some(n), _) => self.max_stale = Some(Some(n)),
                },
            },
            "no-cache" => match arg {
                None => self.no_cache.add_all(),
                Some(a) => self.no_cache.add_argument(a),
            },
            "private" => match arg {
                None => self.private.add_all(),
                Some(a) => self.private.add_argument(a),
            },
            "no-store" => self.no_store = self.flag(arg),
            "public" => self.public = self.flag(arg),
            "must-revalidate" => self.must_revalidate = self.flag(arg),
            "proxy-revalidate" => self.proxy_revalidate = self.flag(arg),
            "must-understand" => self.must_understand = self.flag(arg),
            "no-transform" => self.no_transform = self.flag(arg),
            "immutable" => self.immutable = self.flag(arg),
            "only-if-cached" => self.only_if_cached = self.flag(arg),
            // §5.2.3: unrecognised directives are ignored.
            _ => {}
        }
    }

    /// Directives that take no argument still take effect when one is given
    /// (`no-store=1`): ignoring them would cache more than the sender wants.
    fn flag(&mut self, arg: Option<&str>) -> bool {
        if arg.is_some() {
            self.malformed = true;
        }
        true
    }

    /// Combines a delta-seconds argument with a previous occurrence. Returns
    /// `None` for "no usable value" (the caller decides what that means).
    fn delta(&mut self, previous: Option<u64>, arg: Option<&str>, dup: Duplicate) -> Option<u64> {
        let parsed = arg.and_then(parse_delta_seconds);
        if parsed.is_none() {
            self.malformed = true;
            return match dup {
                Duplicate::ConflictIsZero => None,
                Duplicate::Min | Duplicate::Max => previous,
            };
        }
        match (previous, parsed, dup) {
            (Some(p), Some(n), Duplicate::ConflictIsZero) if p != n => {
                self.malformed = true;
                Some(0)
            }
            (Some(p), Some(n), Duplicate::Min) => Some(p.min(n)),
            (Some(p), Some(n), Duplicate::Max) => Some(p.max(n)),
            (_, n, _) => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn cc(s: &str) -> CacheControl {
        CacheControl::parse(s)
    }

    #[test]
    fn directive_names_are_case_insensitive_9111_5_2() {
        let c = cc("MAX-AGE=10, No-Store, PUBLIC");
        assert_eq!(c.max_age, Some(10));
        assert!(c.no_store && c.public);
    }

    /// Names longer than any known directive, or not ASCII, are unknown and ignored
    /// (§5.2.3); they do not hide the directives around them.
    #[test]
    fn long_and_non_ascii_directive_names_are_ignored_9111_5_2_3() {
        let long = "x".repeat(5000);
        let c = cc(&format!(
            "{long}=1, Stale-While-Revalidate=7, max-\u{e9}ge=9, max-age=3"
        ));
        assert_eq!(c.stale_while_revalidate, Some(7));
        assert_eq!(c.max_age, Some(3));
        assert!(!c.malformed);
        assert_eq!(cc("stale-while-revalidatex=5").stale_while_revalidate, None);
    }

    /// The remembered last value never answers for another one.
    #[test]
    fn remembered_parse_answers_only_for_its_own_value() {
        let mut h = HeaderMap::new();
        for (value, max_age) in [
            ("max-age=60", Some(60)),
            ("max-age=61", Some(61)),
            ("max-age=60", Some(60)),
            ("MAX-AGE=60", Some(60)),
            ("no-store", None),
            ("max-age=60", Some(60)),
        ] {
            h.insert(header::CACHE_CONTROL, value.parse().unwrap());
            let c = CacheControl::from_headers(&h, &header::CACHE_CONTROL);
            assert_eq!(
                (c.max_age, c.no_store),
                (max_age, value == "no-store"),
                "{value}"
            );
        }
    }

    #[test]
    fn quoted_delta_seconds_are_accepted_9111_5_2() {
        // §5.2: "recipients ought to accept both forms, even if a specific
        // form is required".
        assert_eq!(cc("max-age=\"10\"").max_age, Some(10));
        assert_eq!(cc("s-maxage=\"5\"").s_maxage, Some(5));
    }

    #[test]
    fn non_numeric_max_age_is_treated_as_stale_9111_4_2_1() {
        for bad in [
            "max-age=abc",
            "max-age=-1",
            "max-age=1.5",
            "max-age",
            "max-age=",
            "max-age=\"x",
        ] {
            let c = cc(bad);
            assert_eq!(c.max_age, Some(0), "{bad:?}");
            assert!(c.malformed, "{bad:?}");
        }
    }

    #[test]
    fn duplicate_max_age_is_treated_as_invalid_9111_4_2_1() {
        // §4.2.1: with more than one value, "the response should be
        // considered stale".
        assert_eq!(cc("max-age=10, max-age=20").max_age, Some(0));
        assert_eq!(cc("max-age=10, max-age=abc").max_age, Some(0));
        assert_eq!(cc("s-maxage=10, s-maxage=20").s_maxage, Some(0));
        // Repeating the same value carries no conflict.
        assert_eq!(cc("max-age=10, max-age=10").max_age, Some(10));
    }

    #[test]
    fn duplicates_across_field_lines_are_combined_9110_5_3() {
        let mut h = HeaderMap::new();
        h.append(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=10"),
        );
        h.append(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=20, private"),
        );
        let c = CacheControl::from_headers(&h, &header::CACHE_CONTROL);
        assert_eq!(c.max_age, Some(0));
        assert_eq!(c.private, FieldList::All);
    }

    #[test]
    fn overflowing_max_age_saturates_at_2_pow_31_9111_1_2_2() {
        assert_eq!(
            cc("max-age=99999999999999999999999").max_age,
            Some(2_147_483_648)
        );
    }

    #[test]
    fn unknown_directives_are_ignored_9111_5_2_3() {
        let c = cc("community=\"UCI\", foo, bar=baz, max-age=3");
        assert_eq!(
            c,
            CacheControl {
                max_age: Some(3),
                ..CacheControl::default()
            }
        );
    }

    #[test]
    fn empty_and_garbage_fields_give_no_directives() {
        for v in ["", " , ,", ",,,", "=", "=5", "\"", "\u{fffd}"] {
            let c = cc(v);
            assert_eq!(c.max_age, None, "{v:?}");
            assert!(!c.no_store && !c.no_cache.is_present(), "{v:?}");
        }
    }

    #[test]
    fn qualified_no_cache_lists_field_names_9111_5_2_2_4() {
        let c = cc("no-cache=\"Set-Cookie, X-Foo\"");
        assert_eq!(
            c.no_cache,
            FieldList::Fields(vec![header::SET_COOKIE, HeaderName::from_static("x-foo")])
        );
        // Token form is accepted for robustness.
        assert_eq!(
            cc("no-cache=set-cookie").no_cache,
            FieldList::Fields(vec![header::SET_COOKIE])
        );
        // Unqualified wins over qualified.
        assert_eq!(cc("no-cache=\"a\", no-cache").no_cache, FieldList::All);
        assert_eq!(cc("no-cache, no-cache=\"a\"").no_cache, FieldList::All);
        // An argument that is not a field-name list widens to All.
        assert_eq!(cc("no-cache=\"a b\"").no_cache, FieldList::All);
        assert_eq!(cc("no-cache=\"\"").no_cache, FieldList::All);
    }

    #[test]
    fn qualified_private_lists_field_names_9111_5_2_2_7() {
        assert_eq!(
            cc("private=\"x-user\"").private,
            FieldList::Fields(vec![HeaderName::from_static("x-user")])
        );
        assert_eq!(cc("private").private, FieldList::All);
    }

    #[test]
    fn quoted_commas_do_not_split_directives_9111_5_2() {
        let c = cc("private=\"a, b\", max-age=5");
        assert_eq!(c.max_age, Some(5));
        assert_eq!(
            c.private,
            FieldList::Fields(vec![
                HeaderName::from_static("a"),
                HeaderName::from_static("b")
            ])
        );
    }

    #[test]
    fn max_stale_without_value_accepts_any_staleness_9111_5_2_1_2() {
        assert_eq!(cc("max-stale").max_stale, Some(None));
        assert_eq!(cc("max-stale=30").max_stale, Some(Some(30)));
        assert_eq!(cc("max-stale=30, max-stale=10").max_stale, Some(Some(10)));
        assert_eq!(cc("max-stale=30, max-stale").max_stale, Some(Some(30)));
        // A malformed argument does not widen the client's tolerance.
        assert_eq!(cc("max-stale=abc").max_stale, None);
    }

    #[test]
    fn request_directives_parse_9111_5_2_1() {
        let c = cc("min-fresh=20, only-if-cached, no-transform, max-age=0");
        assert_eq!(c.min_fresh, Some(20));
        assert_eq!(c.max_age, Some(0));
        assert!(c.only_if_cached && c.no_transform);
        assert_eq!(cc("min-fresh=5, min-fresh=9").min_fresh, Some(9));
        assert_eq!(cc("min-fresh=x").min_fresh, None);
    }

    #[test]
    fn extension_directives_parse_5861_8246_9111_5_2_2_3() {
        let c = cc("stale-while-revalidate=30, stale-if-error=60, immutable, must-understand, proxy-revalidate, must-revalidate");
        assert_eq!(c.stale_while_revalidate, Some(30));
        assert_eq!(c.stale_if_error, Some(60));
        assert!(c.immutable && c.must_understand && c.proxy_revalidate && c.must_revalidate);
        assert_eq!(cc("stale-while-revalidate=x").stale_while_revalidate, None);
        assert_eq!(
            cc("stale-if-error=9, stale-if-error=3").stale_if_error,
            Some(3)
        );
    }

    #[test]
    fn flags_with_arguments_still_apply() {
        let c = cc("no-store=yes");
        assert!(c.no_store && c.malformed);
    }

    #[test]
    fn pragma_no_cache_applies_only_without_cache_control_9111_5_4() {
        let mut h = HeaderMap::new();
        h.insert(header::PRAGMA, HeaderValue::from_static("foo, No-Cache"));
        assert_eq!(CacheControl::from_request(&h).no_cache, FieldList::All);
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=5"));
        let c = CacheControl::from_request(&h);
        assert_eq!(c.no_cache, FieldList::Absent);
        assert_eq!(c.max_age, Some(5));
        let mut other = HeaderMap::new();
        other.insert(header::PRAGMA, HeaderValue::from_static("x-no-cache"));
        assert_eq!(
            CacheControl::from_request(&other).no_cache,
            FieldList::Absent
        );
    }

    #[test]
    fn targeted_field_parses_as_structured_dictionary_9213_2_2() {
        let c = CacheControl::parse_targeted("max-age=60, must-revalidate, private=\"x-a\"")
            .expect("valid");
        assert_eq!(c.max_age, Some(60));
        assert!(c.must_revalidate);
        assert_eq!(
            c.private,
            FieldList::Fields(vec![HeaderName::from_static("x-a")])
        );
        // Unknown directives keep the field valid (RFC 9213 §3.1's `none`).
        assert_eq!(
            CacheControl::parse_targeted("none"),
            Some(CacheControl::default())
        );
    }

    #[test]
    fn invalid_or_empty_targeted_field_is_ignored_9213_2_2() {
        for bad in ["", "  ", "Max-Age=60", "max-age=60,", "max-age=\"60", "a b"] {
            assert_eq!(CacheControl::parse_targeted(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn targeted_directives_of_the_wrong_type_are_ignored_9213_2_2() {
        let c = CacheControl::parse_targeted("max-age=1.5, s-maxage=-3, no-store=?0, public=5")
            .expect("valid dictionary");
        assert_eq!(c.max_age, None);
        assert_eq!(c.s_maxage, None);
        assert!(!c.no_store && !c.public);
        assert!(c.malformed);
        // Quoted numbers are strings in a structured field, not integers.
        assert_eq!(
            CacheControl::parse_targeted("max-age=\"60\"").and_then(|c| c.max_age),
            None
        );
    }

    #[test]
    fn stale_forbidden_by_must_revalidate_proxy_revalidate_and_s_maxage_9111_5_2_2_10() {
        assert!(cc("must-revalidate").forbids_stale(false));
        assert!(cc("proxy-revalidate").forbids_stale(true));
        assert!(!cc("proxy-revalidate").forbids_stale(false));
        assert!(cc("s-maxage=5").forbids_stale(true));
        assert!(!cc("max-age=5").forbids_stale(true));
    }
}
