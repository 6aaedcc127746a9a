//! The bus's wire format around an opaque payload, and its signature.
//!
//! A message is the caller's payload untouched plus NATS headers: `Trove-Bus` (format version),
//! `Trove-Node` (the publisher), `Nats-Msg-Id` (JetStream's de-duplication key) and, with a
//! signing key, `Trove-Signature`: HMAC-SHA256 (ring, already in the tree for TLS) over the
//! kind of message, the version, the node, the id and the payload, each length-prefixed so no
//! two different messages sign the same bytes. Everything here is pure: no I/O, no clock.

use async_nats::header::{HeaderMap, NATS_MESSAGE_ID};
use ring::hmac;

/// The format version this code writes and the only one it reads.
pub(crate) const VERSION: &str = "1";
pub(crate) const H_VERSION: &str = "Trove-Bus";
pub(crate) const H_NODE: &str = "Trove-Node";
pub(crate) const H_SIGNATURE: &str = "Trove-Signature";

/// What a signature covers besides the fields: an invalidation can't pass for an announcement.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Invalidation,
    Applied,
}

impl Kind {
    fn label(self) -> &'static [u8] {
        match self {
            Kind::Invalidation => b"trove-bus invalidation",
            Kind::Applied => b"trove-bus applied",
        }
    }
}

/// Why a message was not delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// Not a trove-bus message of a version this node reads.
    Malformed(&'static str),
    /// A signing key is set and the signature is missing or wrong.
    Forged(&'static str),
}

/// Signs and checks with the shared key, if any.
pub(crate) struct Signer {
    key: Option<hmac::Key>,
}

impl Signer {
    pub fn new(secret: Option<&str>) -> Signer {
        Signer {
            key: secret.map(|s| hmac::Key::new(hmac::HMAC_SHA256, s.as_bytes())),
        }
    }

    fn tag(key: &hmac::Key, kind: Kind, node: &str, id: &str, payload: &[u8]) -> hmac::Tag {
        hmac::sign(key, &signed_bytes(kind, node, id, payload))
    }

    /// The headers of a message from `node` with id `id` (empty for announcements).
    pub fn seal(&self, kind: Kind, node: &str, id: &str, payload: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(H_VERSION, VERSION);
        h.insert(H_NODE, node);
        if !id.is_empty() {
            h.insert(NATS_MESSAGE_ID, id);
        }
        if let Some(key) = &self.key {
            h.insert(
                H_SIGNATURE,
                to_hex(Self::tag(key, kind, node, id, payload).as_ref()).as_str(),
            );
        }
        h
    }

    /// The publishing node of a well-formed, correctly signed message.
    pub fn open(
        &self,
        kind: Kind,
        headers: Option<&HeaderMap>,
        payload: &[u8],
    ) -> Result<String, Rejection> {
        let h = headers.ok_or(Rejection::Malformed("no headers"))?;
        let get = |name: &str| h.get(name).map(|v| v.as_str());
        match get(H_VERSION) {
            Some(VERSION) => {}
            Some(_) => return Err(Rejection::Malformed("unknown format version")),
            None => return Err(Rejection::Malformed("not a trove-bus message")),
        }
        let node = get(H_NODE)
            .filter(|n| !n.is_empty())
            .ok_or(Rejection::Malformed("no publishing node"))?;
        let id = match kind {
            Kind::Invalidation => get(NATS_MESSAGE_ID.as_ref())
                .filter(|i| !i.is_empty())
                .ok_or(Rejection::Malformed("no message id"))?,
            Kind::Applied => "",
        };
        if let Some(key) = &self.key {
            let sig = get(H_SIGNATURE).ok_or(Rejection::Forged("unsigned"))?;
            let sig = from_hex(sig).ok_or(Rejection::Malformed("signature is not hex"))?;
            // ring compares in constant time.
            hmac::verify(key, &signed_bytes(kind, node, id, payload), &sig)
                .map_err(|_| Rejection::Forged("bad signature"))?;
        }
        Ok(node.to_string())
    }
}

/// The bytes a tag is computed over: each part length-prefixed.
fn signed_bytes(kind: Kind, node: &str, id: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + node.len() + id.len() + payload.len());
    for part in [
        kind.label(),
        VERSION.as_bytes(),
        node.as_bytes(),
        id.as_bytes(),
        payload,
    ] {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Kind, Rejection, Signer, H_NODE, H_VERSION};
    use async_nats::header::HeaderMap;

    const KEY: Option<&str> = Some("a shared secret of some length");

    #[test]
    fn a_signed_message_opens_to_its_node() {
        let s = Signer::new(KEY);
        let h = s.seal(Kind::Invalidation, "n1", "n1-7", b"rule");
        assert_eq!(
            s.open(Kind::Invalidation, Some(&h), b"rule"),
            Ok("n1".into())
        );
    }

    #[test]
    fn a_changed_payload_node_or_kind_is_forged() {
        let s = Signer::new(KEY);
        let h = s.seal(Kind::Invalidation, "n1", "n1-7", b"rule");
        let forged = Err(Rejection::Forged("bad signature"));
        assert_eq!(s.open(Kind::Invalidation, Some(&h), b"rulf"), forged);
        assert_eq!(s.open(Kind::Applied, Some(&h), b"rule"), forged);
        let mut other = h.clone();
        other.insert(H_NODE, "n2");
        assert_eq!(s.open(Kind::Invalidation, Some(&other), b"rule"), forged);
        let wrong_key = Signer::new(Some("another secret of some length"));
        assert_eq!(
            wrong_key.open(Kind::Invalidation, Some(&h), b"rule"),
            forged
        );
    }

    #[test]
    fn unsigned_is_forged_only_when_a_key_is_set() {
        let unsigned = Signer::new(None).seal(Kind::Invalidation, "n1", "id", b"x");
        assert_eq!(
            Signer::new(KEY).open(Kind::Invalidation, Some(&unsigned), b"x"),
            Err(Rejection::Forged("unsigned"))
        );
        assert!(Signer::new(None)
            .open(Kind::Invalidation, Some(&unsigned), b"x")
            .is_ok());
    }

    #[test]
    fn foreign_messages_are_malformed() {
        let s = Signer::new(None);
        assert!(matches!(
            s.open(Kind::Invalidation, None, b"x"),
            Err(Rejection::Malformed(_))
        ));
        let mut h = HeaderMap::new();
        h.insert(H_VERSION, "2");
        h.insert(H_NODE, "n1");
        assert!(matches!(
            s.open(Kind::Invalidation, Some(&h), b"x"),
            Err(Rejection::Malformed(_))
        ));
        let mut no_id = s.seal(Kind::Invalidation, "n1", "", b"x");
        no_id.insert(H_VERSION, "1");
        assert!(matches!(
            s.open(Kind::Invalidation, Some(&no_id), b"x"),
            Err(Rejection::Malformed(_))
        ));
        let mut bad_hex = Signer::new(KEY).seal(Kind::Invalidation, "n1", "id", b"x");
        bad_hex.insert(super::H_SIGNATURE, "zz");
        assert!(matches!(
            Signer::new(KEY).open(Kind::Invalidation, Some(&bad_hex), b"x"),
            Err(Rejection::Malformed(_))
        ));
    }
}
