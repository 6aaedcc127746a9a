//! Test certificates made at run time (feature `testing`): a CA, and certificates it issues
//! for given names and validity, written as PEM files into a directory of the test's. No
//! private key is ever checked into the repository.

use std::path::{Path, PathBuf};

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// When a test certificate is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// 2020 to 2090.
    Current,
    /// 2019 to 2021.
    Expired,
    /// From 2090.
    NotYetValid,
}

/// A certificate authority of the test's own.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate chain and key as PEM text.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Issued {
    /// Writes `NAME.pem` and `NAME.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write test certificate");
        std::fs::write(&key, &self.key_pem).expect("write test key");
        (cert, key)
    }
}

fn params(names: &[&str], validity: Validity) -> CertificateParams {
    let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("test names");
    let (from, to) = match validity {
        Validity::Current => (date_time_ymd(2020, 1, 1), date_time_ymd(2090, 1, 1)),
        Validity::Expired => (date_time_ymd(2019, 1, 1), date_time_ymd(2021, 1, 1)),
        Validity::NotYetValid => (date_time_ymd(2090, 1, 1), date_time_ymd(2095, 1, 1)),
    };
    p.not_before = from;
    p.not_after = to;
    if let Some(n) = names.first() {
        p.distinguished_name.push(DnType::CommonName, *n);
    }
    p
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut p = params(&[], Validity::Current);
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("key");
        let cert = p.self_signed(&key).expect("self-signed CA");
        TestCa { cert, key }
    }

    /// The CA certificate, PEM (what a client's `ca_file` or `--cacert` holds).
    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// Writes the CA certificate to `dir/NAME`; returns the path.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, self.pem()).expect("write test CA");
        p
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by this CA.
    pub fn issue(&self, names: &[&str], validity: Validity) -> Issued {
        let key = KeyPair::generate().expect("key");
        let cert = params(names, validity)
            .signed_by(&key, &self.cert, &self.key)
            .expect("issue");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A self-signed certificate for `names` (no CA vouches for it).
pub fn self_signed(names: &[&str]) -> Issued {
    let key = KeyPair::generate().expect("key");
    let cert = params(names, Validity::Current)
        .self_signed(&key)
        .expect("self-signed");
    Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}
