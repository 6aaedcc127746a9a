//! TLS for trove, on both sides, with [rustls]: the client configuration trove uses to talk
//! to HTTPS origins ([`origin`]), the certificates a TLS listener presents, chosen by SNI
//! and reloaded when they change ([`listener`]), PEM files read with errors that name the
//! file ([`files`]), and why a handshake failed, as a reason that can be counted
//! ([`failure`]).
//!
//! Nothing here knows about HTTP or the cache: the proxy wraps its sockets with what this
//! crate hands back, and the request flow never asks whether bytes came over TLS except
//! for the access log, `X-Forwarded-Proto`/`Forwarded` and the metrics.
//!
//! **Why ring, not aws-lc-rs.** rustls needs a crypto provider. `aws-lc-rs` builds AWS-LC,
//! a C and assembly library, from source: on a fresh Debian machine that is a C compiler plus
//! (for some targets and for its FIPS or bindgen builds) `cmake` and `clang`, and one to two
//! minutes of a two-core machine's build time on every clean build. `ring` builds its
//! C and assembly with `cc` alone, which every Rust toolchain here already needs, and adds a
//! fraction of that time, so the README's two set-up commands stay as they are and CI
//! installs nothing more. Both providers use the same assembly for the
//! ciphers (AES-GCM, ChaCha20-Poly1305) and for X25519 and P-256, so bulk transfer and
//! handshakes cost about the same; BENCHMARKS.md has trove's TLS figures beside nginx's
//! (OpenSSL). Post-quantum key exchange (X25519MLKEM768) is the one thing only aws-lc-rs
//! offers in rustls today; switching is one feature flag in the workspace manifest.
//!
//! **Why rustls-native-certs.** Origins are verified against the system's trust store, what
//! `curl` trusts on the same machine (Debian's `/etc/ssl/certs`, kept by
//! `ca-certificates`), read once per process. `webpki-roots` would compile Mozilla's list
//! into the binary and ignore the operator's own additions; `rustls-platform-verifier`
//! matters on macOS and Windows, which trove does not target.

pub mod failure;
pub mod files;
pub mod listener;
pub mod origin;
#[cfg(feature = "testing")]
pub mod testing;

pub use failure::{HandshakeError, TlsFailure};
pub use listener::{CertFiles, ListenerTls, ListenerTlsSettings, ServerTls, TlsCounters};
pub use origin::{OriginConnector, OriginTlsSettings};

/// The crypto provider every configuration here is built with (see the crate docs).
pub fn provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS setting that cannot be used: a file that is missing or holds no usable PEM, a key
/// that does not match its certificate, a name that is no DNS name.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);
