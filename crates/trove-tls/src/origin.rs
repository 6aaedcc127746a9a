//! The client side: how trove talks TLS to an HTTPS origin.
//!
//! One [`OriginConnector`] per distinct set of [`OriginTlsSettings`] (an `[[origin]]`'s
//! `tls` table, or the defaults for forward-proxy `https://` requests). It holds one rustls
//! `ClientConfig`, so TLS sessions are resumed across the connections it makes (rustls keeps
//! a small in-memory cache of tickets per server name), and the proxy's pool keys idle
//! connections by it, so a connection made with one origin's trust settings is never reused
//! for another's.
//!
//! Verification is on unless `insecure_skip_verify` says otherwise, which is logged loudly at
//! every start and reload. Trust comes from the system's store (read once per process) or,
//! when `ca_file` is set, from that file alone: a private CA pinned for that origin.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::failure::HandshakeError;
use crate::{files, ConfigError};

/// How to talk TLS to one origin: the `tls` table of an `[[origin]]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OriginTlsSettings {
    /// PEM file of the CA certificates to trust for this origin, instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// The name sent as SNI and checked against the origin's certificate; default: the
    /// upstream's host. Needed where the upstream is written as an address.
    pub server_name: Option<String>,
    /// A client certificate chain (PEM) to present to the origin (mutual TLS) ...
    pub client_cert: Option<PathBuf>,
    /// ... and its private key (PEM).
    pub client_key: Option<PathBuf>,
    /// Accept any certificate the origin presents. Dangerous: anyone on the path can read
    /// and change the traffic. Logged as a warning at every start and reload.
    pub insecure_skip_verify: bool,
}

impl OriginTlsSettings {
    /// Every problem with these settings (files unreadable, a key not matching, a bad
    /// name), each a line of its own.
    pub fn problems(&self) -> Vec<String> {
        match OriginConnector::new(self) {
            Ok(_) => Vec::new(),
            Err(e) => vec![e.0],
        }
    }
}

/// What a finished handshake was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    Full,
    Resumed,
}

/// See the module docs.
pub struct OriginConnector {
    settings: OriginTlsSettings,
    connector: TlsConnector,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for OriginConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OriginConnector")
            .field("settings", &self.settings)
            .finish()
    }
}

/// Two connectors are the same when their settings are: that is what the pool keys by.
impl PartialEq for OriginConnector {
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings
    }
}

impl Eq for OriginConnector {}

impl Hash for OriginConnector {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.settings.hash(state);
    }
}

/// The system's trust store, read once: (roots, how many certificates failed to load).
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    Arc::clone(ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!(
                errors = ?found.errors,
                "no trusted CA certificates found in the system's store: HTTPS origins will fail verification unless their [[origin]] sets tls.ca_file (install ca-certificates)"
            );
        } else {
            tracing::debug!(added, ignored, "system trust store loaded");
        }
        Arc::new(roots)
    }))
}

impl OriginConnector {
    /// Builds the client configuration; every file is read now.
    pub fn new(settings: &OriginTlsSettings) -> Result<OriginConnector, ConfigError> {
        let builder = ClientConfig::builder_with_provider(crate::provider())
            .with_protocol_versions(rustls::DEFAULT_VERSIONS)
            .map_err(|e| ConfigError(e.to_string()))?;
        let builder = if settings.insecure_skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnything(crate::provider())))
        } else {
            let roots = match &settings.ca_file {
                Some(path) => {
                    let mut roots = RootCertStore::empty();
                    for c in files::certs(path)? {
                        roots.add(c).map_err(|e| {
                            ConfigError(format!(
                                "{}: not a usable CA certificate: {e}",
                                path.display()
                            ))
                        })?;
                    }
                    Arc::new(roots)
                }
                None => system_roots(),
            };
            builder.with_root_certificates(roots)
        };
        let mut config = match (&settings.client_cert, &settings.client_key) {
            (Some(cert), Some(key)) => {
                let chain = files::certs(cert)?;
                let k = files::key(key)?;
                // Checked here so a mismatch is a config error, not a handshake failure.
                files::certified_key(cert, key)?;
                builder.with_client_auth_cert(chain, k).map_err(|e| {
                    ConfigError(format!("{} with {}: {e}", cert.display(), key.display()))
                })?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(ConfigError(
                    "client_cert and client_key go together: set both or neither".into(),
                ))
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let server_name = match &settings.server_name {
            Some(n) => Some(ServerName::try_from(n.clone()).map_err(|_| {
                ConfigError(format!("server_name {n:?} is not a DNS name or an address"))
            })?),
            None => None,
        };
        Ok(OriginConnector {
            settings: settings.clone(),
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
        })
    }

    pub fn settings(&self) -> &OriginTlsSettings {
        &self.settings
    }

    /// Whether certificates go unchecked (for the start-up warning).
    pub fn skips_verification(&self) -> bool {
        self.settings.insecure_skip_verify
    }

    /// The TLS handshake over `tcp` with the origin `host` (SNI and the name checked, unless
    /// `server_name` is set). The caller bounds it in time.
    pub async fn connect(
        &self,
        host: &str,
        tcp: TcpStream,
    ) -> Result<(TlsStream<TcpStream>, Handshake), HandshakeError> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => ServerName::try_from(host.to_string()).map_err(|_| HandshakeError {
                reason: crate::TlsFailure::NameMismatch,
                detail: format!("{host:?} is not a name a certificate can be checked against"),
            })?,
        };
        let stream = self
            .connector
            .connect(name, tcp)
            .await
            .map_err(|e| HandshakeError::from_io(&e))?;
        let kind = match stream.get_ref().1.handshake_kind() {
            Some(rustls::HandshakeKind::Resumed) => Handshake::Resumed,
            _ => Handshake::Full,
        };
        Ok((stream, kind))
    }
}

/// `insecure_skip_verify`: any certificate is taken, though the handshake's signatures are
/// still checked (so the peer holds the key of the certificate it showed, whatever that is).
#[derive(Debug)]
struct AcceptAnything(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
