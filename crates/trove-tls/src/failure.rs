//! Why a TLS handshake failed, as one reason from a short list: what the metrics count
//! (`trove_origin_failures_total{reason="tls-expired"}`, the listener's
//! `trove_tls_handshake_failures_total{reason=…}`), what a 502's body and the
//! `Cache-Status` detail say, and what an operator acts on. rustls reports far more
//! distinctions than an operator needs; they are folded here, once.

use std::io;

/// One reason a handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlsFailure {
    /// The peer's certificate is past its `notAfter`.
    Expired,
    /// The peer's certificate is before its `notBefore`.
    NotYetValid,
    /// The peer's chain leads to no trusted root (a self-signed certificate, a private CA
    /// not in `ca_file`, a missing intermediate).
    UnknownIssuer,
    /// The peer's certificate does not name the host asked for.
    NameMismatch,
    /// Any other certificate problem: revoked, bad signature, bad encoding, wrong usage.
    BadCertificate,
    /// The peer sent a fatal alert (it refused us: no common version or cipher, our client
    /// certificate, …).
    AlertReceived,
    /// The peer spoke broken or unacceptable TLS (garbage instead of a handshake, an old
    /// protocol version, a message out of order).
    Protocol,
    /// The connection closed or reset before the handshake was done.
    Closed,
    /// The handshake took longer than it may.
    Timeout,
}

impl TlsFailure {
    /// Every reason, in the order metrics list them.
    pub const ALL: [TlsFailure; 9] = [
        TlsFailure::Expired,
        TlsFailure::NotYetValid,
        TlsFailure::UnknownIssuer,
        TlsFailure::NameMismatch,
        TlsFailure::BadCertificate,
        TlsFailure::AlertReceived,
        TlsFailure::Protocol,
        TlsFailure::Closed,
        TlsFailure::Timeout,
    ];

    /// The name metrics, logs and `Cache-Status` use.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsFailure::Expired => "tls-expired",
            TlsFailure::NotYetValid => "tls-not-yet-valid",
            TlsFailure::UnknownIssuer => "tls-unknown-issuer",
            TlsFailure::NameMismatch => "tls-name-mismatch",
            TlsFailure::BadCertificate => "tls-bad-certificate",
            TlsFailure::AlertReceived => "tls-alert-received",
            TlsFailure::Protocol => "tls-protocol-error",
            TlsFailure::Closed => "tls-closed",
            TlsFailure::Timeout => "tls-timeout",
        }
    }

    /// Position in [`TlsFailure::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether the peer's certificate was refused (as opposed to the protocol failing).
    pub fn is_certificate(self) -> bool {
        matches!(
            self,
            TlsFailure::Expired
                | TlsFailure::NotYetValid
                | TlsFailure::UnknownIssuer
                | TlsFailure::NameMismatch
                | TlsFailure::BadCertificate
        )
    }

    /// The reason for a rustls error.
    pub fn of_rustls(e: &rustls::Error) -> TlsFailure {
        use rustls::CertificateError as C;
        match e {
            rustls::Error::InvalidCertificate(c) => match c {
                C::Expired | C::ExpiredContext { .. } => TlsFailure::Expired,
                C::NotValidYet | C::NotValidYetContext { .. } => TlsFailure::NotYetValid,
                C::UnknownIssuer => TlsFailure::UnknownIssuer,
                C::NotValidForName | C::NotValidForNameContext { .. } => TlsFailure::NameMismatch,
                _ => TlsFailure::BadCertificate,
            },
            rustls::Error::AlertReceived(_) => TlsFailure::AlertReceived,
            rustls::Error::NoCertificatesPresented => TlsFailure::BadCertificate,
            _ => TlsFailure::Protocol,
        }
    }

    /// The reason for an I/O error out of a tokio-rustls handshake: rustls's own error
    /// inside it, or the socket's.
    pub fn of_io(e: &io::Error) -> TlsFailure {
        if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return TlsFailure::of_rustls(inner);
        }
        match e.kind() {
            io::ErrorKind::TimedOut => TlsFailure::Timeout,
            io::ErrorKind::InvalidData => TlsFailure::Protocol,
            _ => TlsFailure::Closed,
        }
    }
}

/// A failed handshake: the reason, and rustls's own words for the log and a 502's body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("TLS handshake failed ({}): {detail}", .reason.as_str())]
pub struct HandshakeError {
    pub reason: TlsFailure,
    pub detail: String,
}

impl HandshakeError {
    pub fn from_io(e: &io::Error) -> HandshakeError {
        let reason = TlsFailure::of_io(e);
        let detail = match e.get_ref() {
            Some(inner) => inner.to_string(),
            None if reason == TlsFailure::Closed => "connection closed during the handshake".into(),
            None => e.to_string(),
        };
        HandshakeError { reason, detail }
    }

    pub fn timeout() -> HandshakeError {
        HandshakeError {
            reason: TlsFailure::Timeout,
            detail: "handshake not done in time".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_follow_the_list() {
        for (i, f) in TlsFailure::ALL.iter().enumerate() {
            assert_eq!(f.index(), i);
            assert!(f.as_str().starts_with("tls-"));
        }
    }

    #[test]
    fn rustls_errors_fold_to_reasons() {
        use rustls::CertificateError as C;
        let cert = |c| TlsFailure::of_rustls(&rustls::Error::InvalidCertificate(c));
        assert_eq!(cert(C::Expired), TlsFailure::Expired);
        assert_eq!(cert(C::NotValidYet), TlsFailure::NotYetValid);
        assert_eq!(cert(C::UnknownIssuer), TlsFailure::UnknownIssuer);
        assert_eq!(cert(C::NotValidForName), TlsFailure::NameMismatch);
        assert_eq!(cert(C::Revoked), TlsFailure::BadCertificate);
        let io = io::Error::new(io::ErrorKind::InvalidData, rustls::Error::DecryptError);
        assert_eq!(TlsFailure::of_io(&io), TlsFailure::Protocol);
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(TlsFailure::of_io(&eof), TlsFailure::Closed);
    }
}
