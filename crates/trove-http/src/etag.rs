//! Entity tags (RFC 9110 §8.8.3) and the two ways of comparing them
//! (§8.8.3.2). Validation, preconditions and ranges all need them.

use http::{header, HeaderMap};

use crate::field::split_list;

/// A parsed entity tag: `W/"opaque"` or `"opaque"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntityTag {
    /// True for a weak validator (`W/` prefix).
    pub weak: bool,
    /// The opaque-tag without its quotes.
    pub opaque: String,
}

impl EntityTag {
    /// Parses one entity-tag; `None` when the syntax is wrong (missing
    /// quotes, characters outside `etagc`).
    pub fn parse(s: &str) -> Option<EntityTag> {
        let s = crate::field::trim_ows(s);
        let (weak, rest) = match s.strip_prefix("W/") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let inner = rest.strip_prefix('"')?.strip_suffix('"')?;
        // etagc = %x21 / %x23-7E / obs-text
        if !inner
            .chars()
            .all(|c| c == '!' || ('#'..='~').contains(&c) || !c.is_ascii())
        {
            return None;
        }
        Some(EntityTag {
            weak,
            opaque: inner.to_owned(),
        })
    }

    /// Strong comparison: both strong and identical opaque-tags.
    pub fn strong_eq(&self, other: &EntityTag) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }

    /// Weak comparison: identical opaque-tags, either or both may be weak.
    pub fn weak_eq(&self, other: &EntityTag) -> bool {
        self.opaque == other.opaque
    }
}

impl std::fmt::Display for EntityTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.weak {
            write!(f, "W/\"{}\"", self.opaque)
        } else {
            write!(f, "\"{}\"", self.opaque)
        }
    }
}

/// The value of an `If-Match` / `If-None-Match` field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntityTagList {
    /// `*`: any current representation.
    Any,
    /// Entity tags; members that fail to parse are dropped.
    Tags(Vec<EntityTag>),
}

impl EntityTagList {
    /// Parses all lines of the field `name`; `None` when it is absent.
    pub fn from_headers(headers: &HeaderMap, name: &header::HeaderName) -> Option<EntityTagList> {
        let combined = crate::field::combined(headers, name)?;
        let members = split_list(&combined);
        if members.contains(&"*") {
            return Some(EntityTagList::Any);
        }
        Some(EntityTagList::Tags(
            members.into_iter().filter_map(EntityTag::parse).collect(),
        ))
    }
}

/// The stored response's `ETag`, when it has exactly one valid one.
pub fn response_etag(headers: &HeaderMap) -> Option<EntityTag> {
    let mut values = headers.get_all(header::ETAG).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    EntityTag::parse(first.to_str().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn tag(s: &str) -> EntityTag {
        EntityTag::parse(s).expect("valid tag in test")
    }

    #[test]
    fn comparison_table_9110_8_8_3_2() {
        // The example table of RFC 9110 §8.8.3.2.
        let cases = [
            ("W/\"1\"", "W/\"1\"", false, true),
            ("W/\"1\"", "W/\"2\"", false, false),
            ("W/\"1\"", "\"1\"", false, true),
            ("\"1\"", "\"1\"", true, true),
        ];
        for (a, b, strong, weak) in cases {
            assert_eq!(tag(a).strong_eq(&tag(b)), strong, "{a} {b}");
            assert_eq!(tag(a).weak_eq(&tag(b)), weak, "{a} {b}");
        }
    }

    #[test]
    fn malformed_entity_tags_are_rejected_9110_8_8_3() {
        for bad in [
            "", "abc", "\"abc", "W/abc", "w/\"a\"", "\"a\"b\"", "\"a b\"",
        ] {
            assert_eq!(EntityTag::parse(bad), None, "{bad:?}");
        }
        assert_eq!(tag("\"\"").opaque, "");
        assert_eq!(tag(" W/\"x\" ").to_string(), "W/\"x\"");
    }

    #[test]
    fn if_none_match_lists_and_star() {
        let mut h = HeaderMap::new();
        h.append(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"a\", W/\"b\""),
        );
        h.append(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("junk, \"c\""),
        );
        let list = EntityTagList::from_headers(&h, &header::IF_NONE_MATCH);
        let Some(EntityTagList::Tags(tags)) = list else {
            panic!("expected tags, got {list:?}");
        };
        assert_eq!(tags.len(), 3);
        h.append(header::IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert_eq!(
            EntityTagList::from_headers(&h, &header::IF_NONE_MATCH),
            Some(EntityTagList::Any)
        );
        assert_eq!(EntityTagList::from_headers(&h, &header::IF_MATCH), None);
    }

    #[test]
    fn response_with_two_etags_has_no_usable_etag() {
        let mut h = HeaderMap::new();
        h.append(header::ETAG, HeaderValue::from_static("\"a\""));
        assert_eq!(response_etag(&h), Some(tag("\"a\"")));
        h.append(header::ETAG, HeaderValue::from_static("\"b\""));
        assert_eq!(response_etag(&h), None);
    }
}
