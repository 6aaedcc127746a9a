//! TLS clients for the tests of trove-proxy's TLS listeners (apart from `kit`, which the
//! other crates' tests share and which needs no TLS).

use std::sync::Arc;

/// A TLS client configuration trusting `ca`, offering `alpn` (preferred first).
pub fn tls_client(ca: &trove_tls::testing::TestCa, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca.pem().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}
