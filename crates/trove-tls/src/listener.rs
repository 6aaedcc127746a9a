//! The server side: the certificates a TLS listener presents, chosen by SNI, and kept
//! current as they are renewed.
//!
//! A listener has a default certificate (for clients that send no SNI, or a name none of
//! its certificates holds, as nginx's default server) and any number of others, each
//! answering for the DNS names in its own subject-alternative-name extension (`*.example.com`
//! included), so the operator lists files, never names.
//!
//! **Renewal.** Certificates are read again on [`ServerTls::reload`] (`trove reload`,
//! `SIGHUP`) and when one of their files changes on disk ([`ServerTls::watch`] looks every
//! few seconds: a certbot or ACME client renewing them). A new set takes effect for the
//! *next* handshake; connections already up keep the session they have, so nothing is
//! dropped. A set that does not load (a file half-written, a key not matching its
//! certificate, a certificate not yet valid) is refused with a message naming the file and
//! the reason, the old one is kept, and it is tried again when the files change again.
//!
//! Protocols: TLS 1.3 and 1.2 only, with rustls's cipher suites (AEAD and forward secrecy
//! only); ALPN `http/1.1`. Session tickets with keys that rotate (rustls's `Ticketer`: a new
//! key every six hours, the previous one still accepted) and a session-id cache, so
//! returning clients resume.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, RwLock};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use serde::Deserialize;
use tokio_rustls::TlsAcceptor;

use crate::failure::TlsFailure;
use crate::{files, ConfigError};

/// One certificate chain and its key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertFiles {
    /// Full chain, leaf first (Let's Encrypt's `fullchain.pem`).
    pub cert: PathBuf,
    /// Its private key (`privkey.pem`).
    pub key: PathBuf,
}

/// A `[[listener]]`'s `tls` table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTlsSettings {
    /// The default certificate ...
    pub cert: PathBuf,
    /// ... and its key.
    pub key: PathBuf,
    /// More certificates, each chosen by the names it holds.
    #[serde(default)]
    pub sni: Vec<CertFiles>,
}

impl ListenerTlsSettings {
    fn all(&self) -> impl Iterator<Item = CertFiles> + '_ {
        std::iter::once(CertFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
        })
        .chain(self.sni.iter().cloned())
    }

    /// Every problem with these settings, each naming its file.
    pub fn problems(&self) -> Vec<String> {
        match CertSet::load(self) {
            Ok(_) => Vec::new(),
            Err(e) => vec![e.0],
        }
    }
}

/// Handshakes on the listeners, for `/metrics` and the status page.
#[derive(Debug, Default)]
pub struct TlsCounters {
    /// Handshakes completed.
    pub handshakes: AtomicU64,
    /// Of those, resumed sessions.
    pub resumed: AtomicU64,
    /// Handshakes failed, by [`TlsFailure::index`].
    pub failures: [AtomicU64; TlsFailure::ALL.len()],
    /// Certificate sets loaded after the first (reloads and renewals picked up).
    pub reloads: AtomicU64,
    /// Certificate sets refused (the old one kept).
    pub reload_failures: AtomicU64,
}

impl TlsCounters {
    pub fn failed(&self, why: TlsFailure) {
        self.failures[why.index()].fetch_add(1, Ordering::Relaxed);
    }
}

/// The certificates of one listener, by name.
#[derive(Debug)]
struct CertSet {
    default: Arc<CertifiedKey>,
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.example.com` under `example.com`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    /// The earliest `notAfter`, for the log.
    names: Vec<String>,
}

impl CertSet {
    fn load(settings: &ListenerTlsSettings) -> Result<CertSet, ConfigError> {
        let mut set: Option<CertSet> = None;
        for files in settings.all() {
            let ck = Arc::new(files::certified_key(&files.cert, &files.key)?);
            let leaf = ck
                .end_entity_cert()
                .map_err(|e| ConfigError(format!("{}: {e}", files.cert.display())))?;
            let ee = webpki::EndEntityCert::try_from(leaf).map_err(|e| {
                ConfigError(format!(
                    "{}: not a usable certificate: {e}",
                    files.cert.display()
                ))
            })?;
            let names: Vec<String> = ee.valid_dns_names().map(str::to_ascii_lowercase).collect();
            let set = set.get_or_insert_with(|| CertSet {
                default: Arc::clone(&ck),
                exact: HashMap::new(),
                wildcard: HashMap::new(),
                names: Vec::new(),
            });
            for n in names {
                match n.strip_prefix("*.") {
                    Some(parent) => {
                        set.wildcard
                            .entry(parent.to_string())
                            .or_insert_with(|| Arc::clone(&ck));
                    }
                    None => {
                        set.exact
                            .entry(n.clone())
                            .or_insert_with(|| Arc::clone(&ck));
                    }
                }
                set.names.push(n);
            }
        }
        set.ok_or_else(|| ConfigError("no certificate".into()))
    }

    fn choose(&self, sni: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = sni else {
            return Arc::clone(&self.default);
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(ck) = self.exact.get(&name) {
            return Arc::clone(ck);
        }
        if let Some((_, parent)) = name.split_once('.') {
            if let Some(ck) = self.wildcard.get(parent) {
                return Arc::clone(ck);
            }
        }
        Arc::clone(&self.default)
    }
}

/// Picks a certificate by SNI from the current set; a reload swaps the set.
#[derive(Debug)]
struct SniResolver {
    set: RwLock<Arc<CertSet>>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.set.read().choose(hello.server_name()))
    }
}

/// What the files were when last looked at: modification time and length per file.
type Stamps = Vec<Option<(SystemTime, u64)>>;

fn stamps(settings: &ListenerTlsSettings) -> Stamps {
    settings
        .all()
        .flat_map(|f| [f.cert, f.key])
        .map(|p| {
            std::fs::metadata(&p)
                .ok()
                .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()))
        })
        .collect()
}

/// A TLS listener's server side. See the module docs.
pub struct ServerTls {
    settings: ListenerTlsSettings,
    /// The application protocols offered by ALPN, in the server's order of preference.
    alpn: Vec<Vec<u8>>,
    resolver: Arc<SniResolver>,
    acceptor: TlsAcceptor,
    /// The files as last loaded, or as last refused (not retried until they change again).
    seen: Mutex<Stamps>,
    counters: Arc<TlsCounters>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("settings", &self.settings)
            .finish()
    }
}

/// What a TLS listener is built from: its settings and the counters it adds to.
pub type ListenerTls = Arc<ServerTls>;

/// Session-id cache entries a listener keeps (TLS 1.2 clients that take no tickets).
const SESSION_CACHE: usize = 4096;

impl ServerTls {
    /// Loads the certificates; an error names the file and the reason. `alpn` lists the
    /// application protocols offered (`b"h2"`, `b"http/1.1"`), preferred first: rustls
    /// picks the first of them the client offers, and refuses a client offering none.
    pub fn new(
        settings: &ListenerTlsSettings,
        alpn: &[&[u8]],
        counters: Arc<TlsCounters>,
    ) -> Result<Arc<ServerTls>, ConfigError> {
        let seen = stamps(settings);
        let set = CertSet::load(settings)?;
        let resolver = Arc::new(SniResolver {
            set: RwLock::new(Arc::new(set)),
        });
        let mut config = ServerConfig::builder_with_provider(crate::provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| ConfigError(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        config.alpn_protocols = alpn.clone();
        config.ticketer =
            rustls::crypto::ring::Ticketer::new().map_err(|e| ConfigError(e.to_string()))?;
        config.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE);
        Ok(Arc::new(ServerTls {
            settings: settings.clone(),
            alpn,
            resolver,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            seen: Mutex::new(seen),
            counters,
        }))
    }

    pub fn settings(&self) -> &ListenerTlsSettings {
        &self.settings
    }

    /// The protocols ALPN offers, as given to [`ServerTls::new`].
    pub fn alpn(&self) -> &[Vec<u8>] {
        &self.alpn
    }

    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    pub fn counters(&self) -> &Arc<TlsCounters> {
        &self.counters
    }

    /// The DNS names the current certificates answer for.
    pub fn names(&self) -> Vec<String> {
        self.resolver.set.read().names.clone()
    }

    /// Reads the certificate files again and, if they load, serves them from the next
    /// handshake on; if not, keeps the current ones and says why.
    pub fn reload(&self) -> Result<(), ConfigError> {
        let now = stamps(&self.settings);
        *self.seen.lock() = now;
        match CertSet::load(&self.settings) {
            Ok(set) => {
                *self.resolver.set.write() = Arc::new(set);
                self.counters.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(cert = %self.settings.cert.display(), "TLS certificates loaded");
                Ok(())
            }
            Err(e) => {
                self.counters
                    .reload_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "new TLS certificates refused; the previous ones are still served");
                Err(e)
            }
        }
    }

    /// Reloads when a file changed since it was last read; `None` when none did.
    pub fn reload_if_changed(&self) -> Option<Result<(), ConfigError>> {
        if stamps(&self.settings) == *self.seen.lock() {
            return None;
        }
        Some(self.reload())
    }

    /// Looks at the files every `every` on a thread of its own, for as long as this
    /// `ServerTls` is in use, and reloads when they change.
    pub fn watch(self: &Arc<Self>, every: Duration) {
        let weak: Weak<ServerTls> = Arc::downgrade(self);
        let _ = std::thread::Builder::new()
            .name("trove-tls-watch".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                let Some(tls) = weak.upgrade() else { return };
                let _ = tls.reload_if_changed();
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    fn write(dir: &std::path::Path, name: &str, names: &[&str]) -> CertFiles {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let files = CertFiles {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }

    fn dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("trove-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Exact names beat wildcards, a wildcard covers one label, anything else is the
    /// default's; names compare without case or a trailing dot.
    #[test]
    fn names_choose_certificates() {
        let d = dir("names");
        let default = write(&d, "default", &["default.test"]);
        let settings = ListenerTlsSettings {
            cert: default.cert,
            key: default.key,
            sni: vec![
                write(&d, "exact", &["a.wild.test", "site.test"]),
                write(&d, "wild", &["*.wild.test"]),
            ],
        };
        let set = CertSet::load(&settings).unwrap();
        let which = |sni: Option<&str>| {
            let ck = set.choose(sni);
            if Arc::ptr_eq(&ck, &set.default) {
                "default"
            } else if Arc::ptr_eq(&ck, &set.exact["site.test"]) {
                "exact"
            } else {
                "wild"
            }
        };
        assert_eq!(which(Some("Site.Test.")), "exact");
        assert_eq!(which(Some("a.wild.test")), "exact");
        assert_eq!(which(Some("b.wild.test")), "wild");
        assert_eq!(which(Some("c.b.wild.test")), "default");
        assert_eq!(which(Some("other.test")), "default");
        assert_eq!(which(None), "default");
        let _ = std::fs::remove_dir_all(d);
    }

    /// A key that belongs to another certificate is refused, naming both files; the set
    /// in use stays, and the change is not retried until the files change again.
    #[test]
    fn a_mismatched_renewal_is_refused_and_the_old_set_kept() {
        let d = dir("mismatch");
        let site = write(&d, "site", &["site.test"]);
        let settings = ListenerTlsSettings {
            cert: site.cert.clone(),
            key: site.key.clone(),
            sni: vec![],
        };
        let tls = ServerTls::new(&settings, &[b"http/1.1"], Arc::default()).unwrap();
        assert_eq!(tls.reload_if_changed().map(|r| r.is_ok()), None);
        let other = write(&d, "other", &["site.test"]);
        std::fs::copy(&other.key, &site.key).unwrap();
        let e = tls.reload_if_changed().unwrap().unwrap_err().to_string();
        assert!(e.contains("site.pem") && e.contains("site.key"), "{e}");
        assert_eq!(tls.names(), vec!["site.test".to_string()]);
        assert!(
            tls.reload_if_changed().is_none(),
            "not retried until the files change"
        );
        std::fs::copy(&other.cert, &site.cert).unwrap();
        assert!(tls.reload_if_changed().unwrap().is_ok());
        assert_eq!(tls.counters().reloads.load(Ordering::Relaxed), 1);
        assert_eq!(tls.counters().reload_failures.load(Ordering::Relaxed), 1);
        let _ = std::fs::remove_dir_all(d);
    }
}
