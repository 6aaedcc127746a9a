//! PEM files: a certificate chain, a private key, a bundle of CA certificates. Every error
//! names the file and what was wrong with it, because these are read at start, at a
//! reload and when a renewal lands on disk, and the operator must be able to act on it.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::ConfigError;

fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| ConfigError(format!("{}: cannot read: {e}", path.display())))
}

/// The certificates in a PEM file, in order (a full chain: the leaf first).
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let pem = read(path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            ConfigError(format!(
                "{}: not a PEM certificate file: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(ConfigError(format!(
            "{}: holds no certificate (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn key(path: &Path) -> Result<PrivateKeyDer<'static>, ConfigError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        ConfigError(format!(
            "{}: holds no usable private key ({e})",
            path.display()
        ))
    })
}

/// A certificate chain and its key, made into what rustls presents, with the key checked
/// against the leaf certificate.
pub fn certified_key(
    cert: &Path,
    key_path: &Path,
) -> Result<rustls::sign::CertifiedKey, ConfigError> {
    let chain = certs(cert)?;
    let key = key(key_path)?;
    let provider = crate::provider();
    let ck = rustls::sign::CertifiedKey::from_der(chain, key, &provider).map_err(|e| {
        ConfigError(format!(
            "{} with {}: {e}",
            cert.display(),
            key_path.display()
        ))
    })?;
    Ok(ck)
}
