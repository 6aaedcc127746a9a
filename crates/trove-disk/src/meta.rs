//! A stored head (`trove_store::ObjectHead`) as the `meta` bytes of a record, and back.
//!
//! The precomputed `Prepared` facts are kept too, so a hit on a promoted object is as cheap
//! as one that never left memory and no policy has to be re-run at load time. Decoding
//! refuses anything malformed (a record's checksum already passed, so that means a bug or a
//! format change, never a guess).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use trove_store::{ObjectHead, Prepared};

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

fn put_headers(out: &mut Vec<u8>, h: &HeaderMap) {
    out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    for (n, v) in h {
        out.extend_from_slice(&(n.as_str().len() as u16).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(n.as_str().as_bytes());
        out.extend_from_slice(v.as_bytes());
    }
}

/// The meta bytes of `head`.
pub fn encode(head: &ObjectHead) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + head.prepared.wire.len());
    out.extend_from_slice(&head.status.as_u16().to_le_bytes());
    out.push(head.prepared.policy_id);
    out.push(0);
    out.extend_from_slice(&nanos(head.request_time).to_le_bytes());
    out.extend_from_slice(&nanos(head.response_time).to_le_bytes());
    // 0 = none; else nanoseconds since the epoch + 1.
    let fresh = head
        .prepared
        .fresh_until
        .map_or(0, |t| nanos(t).saturating_add(1));
    out.extend_from_slice(&fresh.to_le_bytes());
    let age = head.prepared.initial_age.as_nanos().min(u64::MAX as u128) as u64;
    out.extend_from_slice(&age.to_le_bytes());
    put_headers(&mut out, &head.headers);
    put_headers(&mut out, &head.request_headers);
    out.extend_from_slice(&(head.prepared.wire.len() as u32).to_le_bytes());
    out.extend_from_slice(&head.prepared.wire);
    out
}

/// Malformed meta bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed stored head")]
pub struct BadMeta;

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadMeta> {
        let end = self.at.checked_add(n).ok_or(BadMeta)?;
        let s = self.b.get(self.at..end).ok_or(BadMeta)?;
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, BadMeta> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().map_err(|_| BadMeta)?,
        ))
    }
    fn u32(&mut self) -> Result<u32, BadMeta> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| BadMeta)?,
        ))
    }
    fn u64(&mut self) -> Result<u64, BadMeta> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| BadMeta)?,
        ))
    }
    fn headers(&mut self) -> Result<HeaderMap, BadMeta> {
        let n = self.u32()? as usize;
        let mut h = HeaderMap::with_capacity(n.min(256));
        for _ in 0..n {
            let nl = self.u16()? as usize;
            let vl = self.u32()? as usize;
            let name = HeaderName::from_bytes(self.take(nl)?).map_err(|_| BadMeta)?;
            let value = HeaderValue::from_bytes(self.take(vl)?).map_err(|_| BadMeta)?;
            h.append(name, value);
        }
        Ok(h)
    }
}

fn time(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}

/// The head stored in `meta`.
pub fn decode(meta: &Bytes) -> Result<ObjectHead, BadMeta> {
    let mut c = Cursor { b: meta, at: 0 };
    let status = StatusCode::from_u16(c.u16()?).map_err(|_| BadMeta)?;
    let policy_id = c.take(2)?[0];
    let request_time = time(c.u64()?);
    let response_time = time(c.u64()?);
    let fresh = c.u64()?;
    let initial_age = Duration::from_nanos(c.u64()?);
    let headers = c.headers()?;
    let request_headers = c.headers()?;
    let wl = c.u32()? as usize;
    let start = c.at;
    c.take(wl)?;
    Ok(ObjectHead {
        status,
        headers,
        request_headers,
        request_time,
        response_time,
        prepared: Prepared {
            wire: meta.slice(start..start + wl),
            fresh_until: (fresh != 0).then(|| time(fresh - 1)),
            initial_age,
            policy_id,
        },
        // Not in the record format yet: an object read back is older than every
        // invalidation rule (see `Tiered::invalidations`).
        labels: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_round_trips() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        let mut req = HeaderMap::new();
        req.insert("accept-encoding", HeaderValue::from_static("gzip"));
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let head = ObjectHead {
            status: StatusCode::NOT_FOUND,
            headers,
            request_headers: req,
            request_time: t,
            response_time: t + Duration::from_millis(5),
            prepared: Prepared {
                wire: Bytes::from_static(b"content-type: text/plain\r\n"),
                fresh_until: Some(t + Duration::from_secs(60)),
                initial_age: Duration::from_secs(3),
                policy_id: 1,
            },
            labels: Default::default(),
        };
        let back = decode(&Bytes::from(encode(&head))).unwrap();
        assert_eq!(back.status, head.status);
        assert_eq!(back.headers, head.headers);
        assert_eq!(back.request_headers, head.request_headers);
        assert_eq!(back.request_time, head.request_time);
        assert_eq!(back.response_time, head.response_time);
        assert_eq!(back.prepared.wire, head.prepared.wire);
        assert_eq!(back.prepared.fresh_until, head.prepared.fresh_until);
        assert_eq!(back.prepared.initial_age, head.prepared.initial_age);
        assert_eq!(back.prepared.policy_id, 1);
        let bytes = encode(&head);
        for n in 0..bytes.len() {
            assert!(decode(&Bytes::copy_from_slice(&bytes[..n])).is_err(), "{n}");
        }
    }
}
