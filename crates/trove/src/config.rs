//! trove's TOML config file. Every section is optional and most keys have a safe default (a
//! `[[listener]]` needs `listen` and `mode`, an `[[origin]]` needs `host` and `upstreams`).
//! Unknown keys and bad values are refused at start-up, every one of them at once, each naming
//! its key: the file is read into a TOML table, each section (and each `[[listener]]` /
//! `[[origin]]` entry) is checked key by key, then the whole is checked for what types alone
//! can't say ([`trove_proxy::Settings::problems`]) and for what can be checked on this machine
//! (the access log's directory).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use trove_proxy::settings::{
    AccessSettings, CacheSettings, ConnectSettings, LimitSettings, ListenerSettings, LogSettings,
    Mode, OriginRoute, PoolSettings, ResolverSettings, TimeoutSettings,
};
use trove_proxy::settings::{ClusterSettings, NamedCacheRoute, TagSettings};
use trove_proxy::Settings;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSettings {
    /// Where `/metrics` and the status page are served; `""` turns the listener off.
    pub listen: String,
    /// Client networks allowed to use the admin listener (others get a 403). Default:
    /// loopback only.
    pub allow: Vec<ipnet::IpNet>,
    /// The admin API's bearer token (`/v1/`); `""` with no `token_file`: a random token is
    /// made at start and written (mode 0600) where `trove purge` … find it (`admin_files`).
    pub token: String,
    /// A file holding the token (its first line), instead of `token`.
    pub token_file: String,
    /// A Unix socket serving the admin listener and API too (mode 0600): `"auto"` (the
    /// default) for `admin-<port>.sock` in trove's runtime directory, a path, or `""` for
    /// none.
    pub socket: String,
    /// The largest object body a put accepts (also bounded by `[cache] max_object`).
    pub max_put_body: String,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            listen: "127.0.0.1:9090".into(),
            allow: vec![
                "127.0.0.0/8".parse().expect("static"),
                "::1/128".parse().expect("static"),
            ],
            token: String::new(),
            token_file: String::new(),
            socket: "auto".into(),
            max_put_body: "64MiB".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSettings {
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Where `trove serve` writes its process id (and `trove reload` / `trove rotate` / `trove
    /// stop` read it); `""` writes none.
    pub pid_file: String,
}

/// A `[[listener]]` entry as written: every key optional here, so that every problem in
/// it is found at once; the required ones are checked after.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerEntry {
    /// The address to listen on (`addr` is accepted as its older name), in any form
    /// [`parse_listen`] reads.
    #[serde(alias = "addr")]
    pub listen: Option<String>,
    pub mode: Option<Mode>,
    /// `tls = { cert = "…", key = "…", sni = [{ cert = "…", key = "…" }] }`: terminate TLS.
    pub tls: Option<trove_proxy::settings::ListenerTlsSettings>,
    /// `http2 = true`: HTTP/2 beside HTTP/1.1 (ALPN `h2` with `tls`, else prior-knowledge
    /// `h2c`).
    pub http2: Option<bool>,
}

/// An `[[origin]]` entry as written (see [`ListenerEntry`]).
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct OriginEntry {
    pub host: Option<String>,
    pub path_prefix: Option<String>,
    pub upstreams: Option<Vec<String>>,
    /// `tls = { ca_file = "…", server_name = "…", client_cert = "…", client_key = "…" }`
    /// for the route's `https://` upstreams.
    pub tls: Option<trove_proxy::settings::OriginTlsSettings>,
}

/// A `[[named_cache]]` entry as written (see [`ListenerEntry`]).
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct NamedCacheEntry {
    pub name: Option<String>,
    pub host: Option<String>,
    pub path_prefix: Option<String>,
}

/// The whole file.
#[derive(Debug, Default, Clone)]
pub struct Config {
    pub listener: Vec<ListenerSettings>,
    pub access: AccessSettings,
    pub cache: CacheSettings,
    pub limits: LimitSettings,
    pub timeouts: TimeoutSettings,
    pub origin_pool: PoolSettings,
    pub connect: ConnectSettings,
    pub resolver: ResolverSettings,
    pub origin: Vec<OriginRoute>,
    pub log: LogSettings,
    pub admin: AdminSettings,
    pub runtime: RuntimeSettings,
    pub tags: TagSettings,
    pub named_cache: Vec<NamedCacheRoute>,
    /// `[cluster]`: none unless written.
    pub cluster: Option<ClusterSettings>,
}

/// Every problem found in a config file, one per line, each naming its key.
#[derive(Debug)]
pub struct Problems(pub Vec<String>);

impl std::fmt::Display for Problems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} problems:", many.len())?;
                for p in many {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Problems {}

/// The sections a file may have.
const SECTIONS: &[&str] = &[
    "listener",
    "access",
    "cache",
    "limits",
    "timeouts",
    "origin_pool",
    "connect",
    "resolver",
    "origin",
    "log",
    "admin",
    "runtime",
    "tags",
    "named_cache",
    "cluster",
];

impl Config {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        Config::parse(&text).map_err(|e| anyhow::anyhow!("config {}: {e}", path.display()))
    }

    /// What trove runs with when given no file: every default, as for an empty file (so the
    /// connection limit fits this machine's open files limit, as when a file leaves it out).
    pub fn without_file() -> Config {
        Config::parse("").unwrap_or_default()
    }

    /// Parses and checks config text: every problem at once.
    pub fn parse(text: &str) -> Result<Config, Problems> {
        let mut table: toml::Table = toml::from_str(text)
            // A syntax error stops the reading; say where, on one line.
            .map_err(|e| Problems(vec![syntax_error(text, &e)]))?;
        let mut p = Vec::new();
        for key in table.keys() {
            if !SECTIONS.contains(&key.as_str()) {
                p.push(format!(
                    "{key}: unknown section or key (sections: {})",
                    SECTIONS.join(", ")
                ));
            }
        }
        // Left out, the connection limit fits this machine's open files limit (below).
        let connections_set = table
            .get("limits")
            .and_then(|v| v.as_table())
            .is_some_and(|t| t.contains_key("max_client_connections"));
        let listener = entries::<ListenerEntry>("listener", table.remove("listener"), &mut p);
        let origin = entries::<OriginEntry>("origin", table.remove("origin"), &mut p);
        let mut config = Config {
            access: section("access", table.remove("access"), &mut p),
            cache: section("cache", table.remove("cache"), &mut p),
            limits: section("limits", table.remove("limits"), &mut p),
            timeouts: section("timeouts", table.remove("timeouts"), &mut p),
            origin_pool: section("origin_pool", table.remove("origin_pool"), &mut p),
            connect: section("connect", table.remove("connect"), &mut p),
            resolver: section("resolver", table.remove("resolver"), &mut p),
            log: section("log", table.remove("log"), &mut p),
            admin: section("admin", table.remove("admin"), &mut p),
            runtime: section("runtime", table.remove("runtime"), &mut p),
            tags: section("tags", table.remove("tags"), &mut p),
            cluster: match table.remove("cluster") {
                None => None,
                Some(v) => match ClusterSettings::deserialize(v) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        p.push(format!("cluster: {}", e.message()));
                        None
                    }
                },
            },
            ..Config::default()
        };
        if !connections_set {
            config.limits.max_client_connections = trove_proxy::fd_limit::fit_connections(
                config.limits.max_client_connections,
                config.origin_pool.max_per_origin,
            );
        }
        let named = entries::<NamedCacheEntry>("named_cache", table.remove("named_cache"), &mut p);
        for (i, n) in named.into_iter().enumerate() {
            match n.name {
                Some(name) => config.named_cache.push(NamedCacheRoute {
                    name,
                    host: n.host.unwrap_or_else(|| "*".into()),
                    path_prefix: n.path_prefix.unwrap_or_else(|| "/".into()),
                }),
                None if reported(&p, &format!("named_cache[{i}]"), &["name"]) => {}
                None => p.push(format!("named_cache[{i}].name: required")),
            }
        }
        for (i, l) in listener.into_iter().enumerate() {
            let addr = match &l.listen {
                Some(text) => match parse_listen(text) {
                    Ok(a) => Some(a),
                    Err(e) => {
                        p.push(format!("listener[{i}].listen: {e}"));
                        None
                    }
                },
                None => None,
            };
            match (addr, l.mode) {
                (Some(addr), Some(mode)) => config.listener.push(ListenerSettings {
                    addr,
                    mode,
                    tls: l.tls.clone(),
                    http2: l.http2.unwrap_or(false),
                }),
                _ => {
                    // A key written with a bad value is reported already, as such.
                    if l.listen.is_none()
                        && !reported(&p, &format!("listener[{i}]"), &["listen", "addr"])
                    {
                        p.push(format!(
                            "listener[{i}].listen: required (an address, e.g. \"127.0.0.1:3128\" or a port alone, \"3128\")"
                        ));
                    }
                    if l.mode.is_none() && !reported(&p, &format!("listener[{i}]"), &["mode"]) {
                        p.push(format!(
                            "listener[{i}].mode: required (\"forward\" or \"reverse\")"
                        ));
                    }
                }
            }
        }
        for (i, o) in origin.into_iter().enumerate() {
            if o.host.is_none() && !reported(&p, &format!("origin[{i}]"), &["host"]) {
                p.push(format!(
                    "origin[{i}].host: required (a host name, or \"*\" for any)"
                ));
            }
            if o.upstreams.is_none() && !reported(&p, &format!("origin[{i}]"), &["upstreams"]) {
                p.push(format!(
                    "origin[{i}].upstreams: required (e.g. [\"http://127.0.0.1:8000\"])"
                ));
            }
            config.origin.push(OriginRoute {
                host: o.host.unwrap_or_else(|| "*".into()),
                path_prefix: o.path_prefix.unwrap_or_else(|| "/".into()),
                upstreams: o.upstreams.unwrap_or_default(),
                tls: o.tls,
            });
        }
        // What types can't say; a route left incomplete above is already reported.
        let settings = config.proxy_settings();
        for problem in settings.problems() {
            if !p
                .iter()
                .any(|q| q.split(':').next() == problem.split(':').next())
            {
                p.push(problem);
            }
        }
        match config.admin_addr() {
            Err(e) => p.push(e.to_string()),
            Ok(admin) => p.extend(collisions(&config.proxy_settings().listeners, admin)),
        }
        if let Err(e) = config.admin_token() {
            p.push(e.to_string());
        }
        if let Err(e) = config.max_put_body() {
            p.push(e.to_string());
        }
        p.extend(check_log_target("log.access", &config.log.access));
        p.extend(check_log_target("log.trace", &config.log.trace));
        if !config.runtime.pid_file.is_empty() {
            p.extend(check_writable_file(
                "runtime.pid_file",
                &config.runtime.pid_file,
            ));
        }
        if p.is_empty() {
            Ok(config)
        } else {
            Err(Problems(p))
        }
    }

    /// The admin API's token: `[admin] token`, or the first line of `token_file`.
    pub fn admin_token(&self) -> anyhow::Result<Option<String>> {
        let a = &self.admin;
        match (a.token.is_empty(), a.token_file.is_empty()) {
            (true, true) => Ok(None),
            (false, true) => Ok(Some(a.token.clone())),
            (true, false) => {
                let text = std::fs::read_to_string(&a.token_file).map_err(|e| {
                    anyhow::anyhow!("admin.token_file: cannot read {}: {e}", a.token_file)
                })?;
                let t = text.lines().next().unwrap_or("").trim().to_string();
                if t.is_empty() {
                    anyhow::bail!("admin.token_file: {} is empty", a.token_file);
                }
                Ok(Some(t))
            }
            (false, false) => anyhow::bail!("admin: set token or token_file, not both"),
        }
    }

    /// `[admin] max_put_body` in bytes.
    pub fn max_put_body(&self) -> anyhow::Result<u64> {
        trove_proxy::settings::parse_size(&self.admin.max_put_body)
            .map_err(|e| anyhow::anyhow!("admin.max_put_body: {e}"))
    }

    /// The admin listener address, if enabled.
    pub fn admin_addr(&self) -> anyhow::Result<Option<SocketAddr>> {
        if self.admin.listen.is_empty() {
            return Ok(None);
        }
        parse_listen(&self.admin.listen)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("admin.listen: {e}"))
    }

    /// What `trove serve --check` adds to [`Config::parse`]: every address trove would
    /// listen on is tried (bound and let go at once), so a port another process holds, or
    /// one this user may not bind, is found before a start fails on it. A port held by
    /// the trove this config's `pid_file` names is fine (a check before a reload).
    pub fn check_ports(&self) -> Vec<String> {
        let mut p = self.check_disk();
        p.extend(self.check_listeners());
        p
    }

    /// A disk tier start-up would refuse (a regular file, a path that can't be made, a
    /// directory this user can't write) fails the check too, unless the operator asked to
    /// degrade (issue 19, defect 11). On the disk, so for `--check` only, not `parse`.
    fn check_disk(&self) -> Vec<String> {
        match self.proxy_settings().cache.disk.as_ref() {
            Some(d) if d.on_failure == trove_proxy::settings::DiskFailure::Stop => d.check_paths(),
            _ => Vec::new(),
        }
    }

    fn check_listeners(&self) -> Vec<String> {
        let running = self
            .pid_file()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| t.trim().parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "trove")
            });
        let mut keys: Vec<(String, SocketAddr)> = self
            .proxy_settings()
            .listeners
            .iter()
            .enumerate()
            .map(|(i, l)| (format!("listener[{i}].listen"), l.addr))
            .collect();
        if let Ok(Some(a)) = self.admin_addr() {
            keys.push(("admin.listen".into(), a));
        }
        let mut p = Vec::new();
        for (key, addr) in keys {
            if addr.port() == 0 {
                continue;
            }
            match std::net::TcpListener::bind(addr) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && running.is_some() => {
                    eprintln!(
                        "{key}: {addr} is in use, by the running trove (process {}) as it seems: fine for a reload",
                        running.unwrap_or_default()
                    );
                }
                Err(e) => p.push(format!("{key}: cannot listen on {addr}: {e}")),
            }
        }
        p
    }

    /// The process-id file, if one is configured.
    pub fn pid_file(&self) -> Option<PathBuf> {
        (!self.runtime.pid_file.is_empty()).then(|| PathBuf::from(&self.runtime.pid_file))
    }

    /// The proxy's part of the config. No listener configured means the default forward
    /// proxy on 127.0.0.1:3128.
    pub fn proxy_settings(&self) -> Settings {
        let defaults = Settings::default();
        Settings {
            listeners: if self.listener.is_empty() {
                defaults.listeners
            } else {
                self.listener.clone()
            },
            access: self.access.clone(),
            cache: self.cache.clone(),
            limits: self.limits.clone(),
            timeouts: self.timeouts.clone(),
            origin_pool: self.origin_pool.clone(),
            connect: self.connect.clone(),
            resolver: self.resolver.clone(),
            origins: self.origin.clone(),
            log: self.log.clone(),
            other_listeners: Vec::new(),
            tags: self.tags.clone(),
            named_caches: self.named_cache.clone(),
            cluster: self.cluster.clone(),
        }
    }
}

/// Reads one section. If it doesn't deserialize as a whole, each key is tried alone (and each
/// key of a nested table, like `[cache.cookies]`), so every bad key is reported by its full
/// name; the section is then made of its good keys, so the checks that follow still see
/// them (the config is refused anyway).
fn section<T: DeserializeOwned + Default>(
    name: &str,
    value: Option<toml::Value>,
    problems: &mut Vec<String>,
) -> T {
    let Some(value) = value else {
        return T::default();
    };
    match T::deserialize(value.clone()) {
        Ok(t) => t,
        Err(whole) => {
            let before = problems.len();
            let mut good = toml::Table::new();
            if let toml::Value::Table(table) = value {
                for (key, v) in table {
                    if isolate::<T>(&format!("{name}.{key}"), &key, v.clone(), problems) {
                        good.insert(key, v);
                    }
                }
            }
            if problems.len() == before {
                problems.push(format!("{name}: {}", message(&whole)));
            }
            T::deserialize(toml::Value::Table(good)).unwrap_or_default()
        }
    }
}

/// Tries `key = value` alone as a `T`; for a nested table, its keys one by one. True if it
/// is good.
fn isolate<T: DeserializeOwned>(
    path: &str,
    key: &str,
    value: toml::Value,
    problems: &mut Vec<String>,
) -> bool {
    let one = |v: toml::Value| {
        let mut t = toml::Table::new();
        t.insert(key.to_string(), v);
        T::deserialize(toml::Value::Table(t))
    };
    let Err(e) = one(value.clone()) else {
        return true;
    };
    if let toml::Value::Table(inner) = value {
        let before = problems.len();
        for (sub, v) in inner {
            let mut t = toml::Table::new();
            t.insert(sub.clone(), v);
            if let Err(e) = one(toml::Value::Table(t)) {
                problems.push(format!("{path}.{sub}: {}", message(&e)));
            }
        }
        if problems.len() > before {
            return false;
        }
    }
    problems.push(format!("{path}: {}", message(&e)));
    false
}

/// Reads an array of tables (`[[listener]]`, `[[origin]]`), each entry like a section.
fn entries<T: DeserializeOwned + Default>(
    name: &str,
    value: Option<toml::Value>,
    problems: &mut Vec<String>,
) -> Vec<T> {
    match value {
        None => Vec::new(),
        Some(toml::Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| section(&format!("{name}[{i}]"), Some(v), problems))
            .collect(),
        Some(_) => {
            problems.push(format!("{name}: write it as [[{name}]] tables"));
            Vec::new()
        }
    }
}

/// True when a problem about one of `keys` of `entry` (`listener[0]`…) is reported already.
fn reported(problems: &[String], entry: &str, keys: &[&str]) -> bool {
    keys.iter().any(|k| {
        let key = format!("{entry}.{k}");
        problems.iter().any(|q| {
            q.strip_prefix(&key)
                .is_some_and(|rest| rest.starts_with(':'))
        })
    })
}

/// A TOML syntax error on one line: where (line and column) and what, without the
/// excerpt of the file the `toml` crate draws over several lines.
fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    let what = message(e);
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what,
    }
}

/// A listening address as Squid and nginx users write it:
///
/// - `127.0.0.1:3128`, `[::1]:3128`: an address and port;
/// - `3128`, `:3128`, `*:3128`: a port alone, on every IPv4 address (Squid's
///   `http_port 3128`, nginx's `listen 3128`);
/// - `localhost:3128`: a host name, resolved once, here, at start; trove listens on its
///   first address, IPv4 first (`localhost` is 127.0.0.1).
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let t = text.trim();
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    let port_alone = t
        .strip_prefix("*:")
        .or_else(|| t.strip_prefix(':'))
        .unwrap_or(t);
    if !port_alone.is_empty() && port_alone.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 = port_alone
            .parse()
            .map_err(|_| format!("{text:?}: {port_alone} is not a port (0 to 65535)"))?;
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    let form = "write host:port (\"127.0.0.1:3128\", \"[::1]:3128\", \"localhost:3128\") or a port alone (\"3128\")";
    let Some((host, port)) = t.rsplit_once(':') else {
        return Err(format!("{text:?} names no port: {form}"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{text:?}: {port:?} is not a port: {form}"))?;
    let name_like = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !name_like {
        return Err(format!("{text:?} is not an address: {form}"));
    }
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{host:?} resolves to no address"))
}

/// Two listeners (or a listener and the admin listener) that would take the same port on
/// the same address, or one of them on every address: the second could never start.
fn collisions(listeners: &[ListenerSettings], admin: Option<SocketAddr>) -> Vec<String> {
    let mut taken: Vec<(String, SocketAddr)> = Vec::new();
    let mut p = Vec::new();
    let all = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (format!("listener[{i}].listen"), l.addr))
        .chain(admin.map(|a| ("admin.listen".to_string(), a)));
    for (key, addr) in all {
        if addr.port() == 0 {
            continue;
        }
        // `[::]` takes IPv4 too (a dual-stack socket); `0.0.0.0` only IPv4.
        let covers =
            |w: SocketAddr, x: SocketAddr| w.ip().is_unspecified() && (w.is_ipv6() || x.is_ipv4());
        let clash = taken.iter().find(|(_, b)| {
            b.port() == addr.port() && (b.ip() == addr.ip() || covers(*b, addr) || covers(addr, *b))
        });
        match clash {
            Some((other, b)) => p.push(format!(
                "{key}: {addr} takes the port of {other} ({b}); give each listener its own port"
            )),
            None => taken.push((key, addr)),
        }
    }
    p
}

/// A deserialisation error's message, on one line.
fn message(e: &toml::de::Error) -> String {
    e.message().trim().replace('\n', " ")
}

/// `"-"` and `""` need nothing; a path must be a file trove can append to, in a directory
/// that exists.
fn check_log_target(key: &str, target: &str) -> Vec<String> {
    match target {
        "" | "-" => Vec::new(),
        path => check_writable_file(key, path),
    }
}

/// A file that exists must be writable; one that doesn't must have an existing, writable
/// directory to be created in. Nothing is created or changed.
fn check_writable_file(key: &str, path: &str) -> Vec<String> {
    let p = Path::new(path);
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => vec![format!("{key}: {path:?} is a directory, not a file")],
        Ok(_) => match std::fs::OpenOptions::new().append(true).open(p) {
            Ok(_) => Vec::new(),
            Err(e) => vec![format!("{key}: cannot write {path:?}: {e}")],
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => match writable_dir(dir) {
                    Ok(()) => Vec::new(),
                    Err(e) => vec![format!(
                        "{key}: cannot create {path:?}: directory {} is not writable: {e}",
                        dir.display()
                    )],
                },
                Ok(_) => vec![format!("{key}: {} is not a directory", dir.display())],
                Err(e) => vec![format!(
                    "{key}: cannot create {path:?}: directory {}: {e}",
                    dir.display()
                )],
            }
        }
        Err(e) => vec![format!("{key}: {path:?}: {e}")],
    }
}

/// Whether this process may create files in `dir`, asked of the kernel (`access(2)` with
/// `W_OK`, which also accounts for a read-only mount) without creating anything.
fn writable_dir(dir: &Path) -> std::io::Result<()> {
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).map_err(std::io::Error::from)
}

/// A commented example config, printed by `trove serve --print-config`.
pub const EXAMPLE: &str = include_str!("../../../trove.example.toml");

#[cfg(test)]
mod tests {
    use super::*;
    use trove_proxy::Mode;

    #[test]
    fn empty_file_gives_the_defaults() {
        let c = Config::parse("").unwrap();
        let s = c.proxy_settings();
        assert_eq!(s.listeners[0].addr.to_string(), "127.0.0.1:3128");
        assert_eq!(s.listeners[0].mode, Mode::Forward);
        assert_eq!(s.cache.memory, 256 << 20);
        assert_eq!(
            c.admin_addr().unwrap().unwrap().to_string(),
            "127.0.0.1:9090"
        );
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e = Config::parse("[cache]\nmemroy = \"1GiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("memroy"), "{e}");
        let e = Config::parse("colour = 1\n").unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let e = Config::parse("[cache]\nmemory = \"lots\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("memory"), "{e}");
        let e = Config::parse("[[listener]]\naddr = \"127.0.0.1:1\"\nmode = \"sideways\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sideways") || e.contains("mode"), "{e}");
        let e = Config::parse("[[listener]]\naddr = \"127.0.0.1:1\"\nmode = \"reverse\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("origin"), "{e}");
        let e = Config::parse("[[origin]]\nhost = \"*\"\nupstreams = [\"ftp://x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("upstreams"), "{e}");
    }

    /// TLS settings are read, and what cannot be used is named by key and file.
    #[test]
    fn tls_settings_are_read_and_checked() {
        let c = Config::parse(
            "[[origin]]\nhost = \"*\"\nupstreams = [\"https://x\"]\ntls = { server_name = \"x.example\" }\n",
        )
        .unwrap();
        let tls = c.origin[0].tls.as_ref().unwrap();
        assert_eq!(tls.server_name.as_deref(), Some("x.example"));
        let e = Config::parse(
            "[[origin]]\nhost = \"*\"\nupstreams = [\"https://x\"]\ntls = { ca_file = \"/nonexistent/ca.pem\" }\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("origin[0].tls") && e.contains("/nonexistent/ca.pem"),
            "{e}"
        );
        let e = Config::parse(
            "[[origin]]\nhost = \"*\"\nupstreams = [\"http://x\"]\ntls = { insecure_skip_verify = true }\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("applies to https"), "{e}");
        let e = Config::parse(
            "[[listener]]\nlisten = \"127.0.0.1:8443\"\nmode = \"forward\"\ntls = { cert = \"/nonexistent/c.pem\", key = \"/nonexistent/k.pem\" }\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("listener[0].tls") && e.contains("/nonexistent/c.pem"),
            "{e}"
        );
    }

    #[test]
    fn zero_durations_are_refused_by_name() {
        let e = Config::parse("[origin_pool]\nidle_timeout = \"0s\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("origin_pool.idle_timeout"), "{e}");
        let e = Config::parse("[origin_pool]\nidle_timeout = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("origin_pool.idle_timeout"), "{e}");
        let e = Config::parse("[timeouts]\nclient_idle = \"0ms\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("timeouts.client_idle"), "{e}");
        Config::parse("[cache]\nheuristic_max = \"0s\"\n").unwrap();
    }

    /// Newer size and duration keys need their unit, and refuse zero, naming the key.
    #[test]
    fn stream_buffer_needs_a_unit_and_room_for_the_read_ahead() {
        let e = Config::parse("[cache]\nstream_buffer = 1048576\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stream_buffer") && e.contains("unit"), "{e}");
        let e = Config::parse("[cache]\nstream_buffer = \"1048576\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stream_buffer") && e.contains("unit"), "{e}");
        let e = Config::parse("[cache]\nstream_buffer = \"0MiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cache.stream_buffer") && e.contains("greater than 0"),
            "{e}"
        );
        let e = Config::parse("[cache]\nstream_buffer = \"32KiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cache.stream_buffer") && e.contains("read_ahead"),
            "{e}"
        );
        let c = Config::parse("[cache]\nstream_buffer = \"4MiB\"\n").unwrap();
        assert_eq!(c.proxy_settings().cache.stream_buffer, 4 << 20);
    }

    /// The request-body limits: units required, zero refused, by name.
    #[test]
    fn request_body_limits_need_units_and_refuse_zero() {
        for (text, key, why) in [
            ("[timeouts]\nclient_body = 30\n", "client_body", "unit"),
            ("[timeouts]\nclient_body = \"30\"\n", "client_body", "unit"),
            (
                "[timeouts]\nclient_body = \"0s\"\n",
                "timeouts.client_body",
                "greater than 0",
            ),
            (
                "[limits]\nclient_body_min_rate = 1024\n",
                "client_body_min_rate",
                "unit",
            ),
            (
                "[limits]\nclient_body_min_rate = \"0KiB/s\"\n",
                "limits.client_body_min_rate",
                "greater than 0",
            ),
            (
                "[limits]\nclient_body_buffer = 65536\n",
                "client_body_buffer",
                "unit",
            ),
            (
                "[limits]\nclient_body_buffer = \"0B\"\n",
                "limits.client_body_buffer",
                "greater than 0",
            ),
            (
                "[origin_pool]\nmax_uploads_per_origin = 0\n",
                "origin_pool.max_uploads_per_origin",
                "between",
            ),
            (
                "[origin_pool]\nmax_per_origin = 8\nmax_uploads_per_origin = 9\n",
                "origin_pool.max_uploads_per_origin",
                "between",
            ),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(why), "{text}: {e}");
        }
        let c = Config::parse(
            "[timeouts]\nclient_body = \"10s\"\n[limits]\nclient_body_min_rate = \"2KiB/s\"\n\
             client_body_buffer = \"16KiB\"\n[origin_pool]\nmax_per_origin = 8\n",
        )
        .unwrap();
        let s = c.proxy_settings();
        assert_eq!(s.timeouts.client_body, std::time::Duration::from_secs(10));
        assert_eq!(s.limits.client_body_min_rate, 2048);
        assert_eq!(s.limits.client_body_buffer, 16 << 10);
        assert_eq!(
            s.origin_pool.uploads_per_origin(),
            2,
            "a quarter by default"
        );
    }

    #[test]
    fn destination_and_admin_acl_settings_are_checked_by_name() {
        let c = Config::parse(
            "[access]\nlocal_clients = []\nallow_destinations = [\"127.0.0.1:8080\", \"[fd00::/8]:443\"]\ndeny_private_destinations = true\n[admin]\nallow = [\"10.0.0.0/24\"]\n",
        )
        .unwrap();
        let s = c.proxy_settings();
        assert!(s.access.local_clients.is_empty());
        assert!(s.access.deny_private_destinations);
        assert_eq!(
            c.admin.allow,
            vec!["10.0.0.0/24".parse::<ipnet::IpNet>().unwrap()]
        );
        let e = Config::parse("[access]\nallow_destinations = [\"nope\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("access.allow_destinations"), "{e}");
        let e = Config::parse("[admin]\nallow = [\"everyone\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("allow") || e.contains("everyone"), "{e}");
        let d = Config::parse("").unwrap();
        assert_eq!(d.admin.allow.len(), 2, "loopback by default");
        assert_eq!(d.proxy_settings().access.local_clients.len(), 2);
    }

    #[test]
    fn resolver_settings_need_units_and_are_checked_by_name() {
        let c = Config::parse(
            "[resolver]\nmax_ttl = \"10m\"\nmin_ttl = \"0s\"\nnegative_ttl = \"250ms\"\nmax_names = 5\n",
        )
        .unwrap();
        let r = c.proxy_settings().resolver;
        assert_eq!(r.max_ttl, std::time::Duration::from_secs(600));
        assert_eq!(r.min_ttl, std::time::Duration::ZERO);
        assert_eq!(r.negative_ttl, std::time::Duration::from_millis(250));
        assert_eq!(r.max_names, 5);
        for bad in [
            "max_ttl = 60",
            "max_ttl = \"60\"",
            "negative_ttl = \"1.5\"",
            "min_ttl = \"5 parsecs\"",
        ] {
            let e = Config::parse(&format!("[resolver]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("unit"), "{bad}: {e}");
            assert!(e.contains(bad.split(' ').next().unwrap()), "{bad}: {e}");
        }
        for (bad, key) in [
            ("max_ttl = \"0s\"", "resolver.max_ttl"),
            ("max_names = 0", "resolver.max_names"),
            ("min_ttl = \"2h\"", "resolver.min_ttl"),
        ] {
            let e = Config::parse(&format!("[resolver]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    /// Every problem in one go, each by its full key: the operator fixes the file once.
    #[test]
    fn every_problem_is_reported_at_once() {
        let text = "[cache]\nmemroy = \"1GiB\"\nmax_object = \"5\"\n\
                    [cache.cookies]\nset_cookie = \"eat\"\n\
                    [timeouts]\nconnect = \"5\"\nclient_idle = \"0s\"\n\
                    [[listener]]\nlisten = \"127.0.0.1:1\"\n\
                    [[origin]]\nhost = \"*\"\n\
                    [log]\naccess = \"/nonexistent/dir/access.log\"\n\
                    [colour]\n";
        let e = Config::parse(text).unwrap_err();
        let all = e.to_string();
        for key in [
            "cache.memroy",
            "cache.max_object",
            "cache.cookies.set_cookie",
            "timeouts.connect",
            "timeouts.client_idle",
            "listener[0].mode",
            "origin[0].upstreams",
            "log.access",
            "colour",
        ] {
            assert!(
                e.0.iter().any(|p| p.starts_with(key)),
                "{key} missing from:\n{all}"
            );
        }
        assert!(
            all.starts_with(&format!("{} problems:", e.0.len())),
            "{all}"
        );
        assert!(all.contains("/nonexistent/dir"), "{all}");
    }

    /// Sizes and durations need their unit; the units the messages list are the ones accepted.
    #[test]
    fn units_are_required_and_the_listed_ones_accepted() {
        for (text, key) in [
            ("[timeouts]\nconnect = \"5\"\n", "timeouts.connect"),
            ("[timeouts]\nconnect = 5\n", "timeouts.connect"),
            ("[cache]\nmemory = 1073741824\n", "cache.memory"),
            ("[cache]\nmemory = \"1G\"\n", "cache.memory"),
            ("[cache.abort]\nmin_left = \"16\"\n", "cache.abort.min_left"),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.starts_with(key), "{text}: {e}");
        }
        let c = Config::parse("[cache]\nmemory = \"1GB\"\nmax_object = \"1MiB\"\n").unwrap();
        assert_eq!(c.cache.memory, 1_000_000_000);
        assert_eq!(c.cache.max_object, 1 << 20);
        let c = Config::parse("[timeouts]\nconnect = \"1500ms\"\n").unwrap();
        assert_eq!(c.timeouts.connect, std::time::Duration::from_millis(1500));
    }

    /// A listener's address is `listen`, as the admin's is; `addr` is still read.
    #[test]
    fn listener_address_is_listen_and_required_keys_are_named() {
        let c = Config::parse("[[listener]]\nlisten = \"127.0.0.1:3129\"\nmode = \"forward\"\n")
            .unwrap();
        assert_eq!(c.listener[0].addr.to_string(), "127.0.0.1:3129");
        let c =
            Config::parse("[[listener]]\naddr = \"127.0.0.1:3130\"\nmode = \"forward\"\n").unwrap();
        assert_eq!(c.listener[0].addr.to_string(), "127.0.0.1:3130");
        let e = Config::parse("[[listener]]\nmode = \"forward\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("listener[0].listen: required"), "{e}");
        let e = Config::parse("[[origin]]\nupstreams = [\"http://127.0.0.1:1\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("origin[0].host: required"), "{e}");
    }

    /// Issue 20: the forms Squid and nginx users write, a port alone and a host name.
    #[test]
    fn listen_takes_a_port_alone_and_a_host_name() {
        for (text, want) in [
            ("3128", "0.0.0.0:3128"),
            (":3128", "0.0.0.0:3128"),
            ("*:3128", "0.0.0.0:3128"),
            ("localhost:3128", "127.0.0.1:3128"),
            ("127.0.0.1:3128", "127.0.0.1:3128"),
            ("[::1]:3128", "[::1]:3128"),
        ] {
            assert_eq!(
                parse_listen(text).map(|a| a.to_string()),
                Ok(want.into()),
                "{text}"
            );
        }
        for bad in [
            ":99999",
            "localhost",
            "local host:1",
            "127.0.0.1:x",
            "",
            "a/b:1",
        ] {
            assert!(parse_listen(bad).is_err(), "{bad:?}");
        }
        let c = Config::parse("[[listener]]\nlisten = \":3129\"\nmode = \"forward\"\n[admin]\nlisten = \"localhost:9191\"\n").unwrap();
        assert_eq!(c.listener[0].addr.to_string(), "0.0.0.0:3129");
        assert_eq!(
            c.admin_addr().unwrap().unwrap().to_string(),
            "127.0.0.1:9191"
        );
    }

    /// `[cluster]` (issue 24): read whole; a node missing from its own list, an unknown key
    /// or a bad mode is refused, naming the section.
    #[test]
    fn cluster_section() {
        let nodes = "nodes = [ { id = \"a\", addr = \"127.0.0.1:8081\" }, { id = \"b\", addr = \"127.0.0.1:8082\" } ]\n";
        let c = Config::parse(&format!(
            "[cluster]\nnode = \"a\"\n{nodes}probe_interval = \"250ms\"\n"
        ))
        .unwrap();
        let s = c.proxy_settings().cluster.unwrap();
        assert_eq!(
            (s.node.as_str(), s.mode.as_str(), s.nodes.len()),
            ("a", "shard", 2)
        );
        assert_eq!(s.probe_interval, std::time::Duration::from_millis(250));
        for (text, says) in [
            (format!("[cluster]\nnode = \"z\"\n{nodes}"), "not among"),
            (
                format!("[cluster]\nnode = \"a\"\nmode = \"mirror\"\n{nodes}"),
                "mode",
            ),
            (
                format!("[cluster]\nnode = \"a\"\npeers = 3\n{nodes}"),
                "peers",
            ),
            ("[cluster]\nnode = \"a\"\n".to_string(), "nodes"),
        ] {
            let e = Config::parse(&text).unwrap_err().to_string();
            assert!(e.contains("cluster") && e.contains(says), "{text}: {e}");
        }
        assert!(Config::parse("")
            .unwrap()
            .proxy_settings()
            .cluster
            .is_none());
    }

    /// Issue 20: a key with a bad value was also reported "required".
    #[test]
    fn a_bad_value_is_one_problem_not_also_a_missing_key() {
        for (text, key) in [
            (
                "[[listener]]\nlisten = \"127.0.0.1:1\"\nmode = \"revrse\"\n",
                "listener[0].mode",
            ),
            (
                "[[listener]]\nlisten = \"no such form\"\nmode = \"forward\"\n",
                "listener[0].listen",
            ),
            (
                "[[listener]]\nlisten = 3128.5\nmode = \"forward\"\n",
                "listener[0].listen",
            ),
            (
                "[[origin]]\nhost = 5\nupstreams = [\"http://127.0.0.1:1\"]\n",
                "origin[0].host",
            ),
            ("[[named_cache]]\nname = 5\n", "named_cache[0].name"),
        ] {
            let e = Config::parse(text).unwrap_err();
            let about: Vec<&String> = e.0.iter().filter(|p| p.starts_with(key)).collect();
            assert_eq!(about.len(), 1, "{text}: {e}");
            assert!(!about[0].contains("required"), "{text}: {e}");
        }
    }

    /// Issue 20: a syntax error is one line saying where, without the `toml` crate's
    /// drawing of the file (`|` and `^` squashed together).
    #[test]
    fn a_syntax_error_is_one_clean_line() {
        let e = Config::parse("[cache]\nmemory = \"1GiB\"\nmemory = \"2GiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 3, column 1: "), "{e}");
        assert!(e.contains("duplicate key"), "{e}");
        assert!(
            !e.contains('|') && !e.contains('^') && !e.contains('\n'),
            "{e}"
        );
    }

    /// Issue 20: two listeners, or a listener and the admin listener, on one port.
    #[test]
    fn listeners_sharing_a_port_are_refused_by_name() {
        let e = Config::parse("[[listener]]\nlisten = \"127.0.0.1:9090\"\nmode = \"forward\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("admin.listen: ") && e.contains("listener[0].listen"),
            "{e}"
        );
        let e = Config::parse(
            "[[listener]]\nlisten = \"3128\"\nmode = \"forward\"\n[[listener]]\nlisten = \"127.0.0.1:3128\"\nmode = \"forward\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("listener[1].listen: "), "{e}");
        // Other ports, and port 0 (any free port), are fine.
        Config::parse("[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"forward\"\n[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"forward\"\n[admin]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    }

    /// Issue 20: `--check` passed a port another process holds.
    #[test]
    fn check_ports_finds_a_port_in_use() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let c = Config::parse(&format!(
            "[[listener]]\nlisten = \"127.0.0.1:{port}\"\nmode = \"forward\"\n[admin]\nlisten = \"127.0.0.1:0\"\n"
        ))
        .unwrap();
        let p = c.check_ports();
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("listener[0].listen: cannot listen on"),
            "{p:?}"
        );
        drop(held);
        assert!(c.check_ports().is_empty());
    }

    /// Issue 20: left out, the connection limit fits the open files limit; set, it is kept.
    #[test]
    fn max_client_connections_left_out_fits_the_machine() {
        let c = Config::parse("").unwrap();
        let n = c.limits.max_client_connections;
        assert!((256..=50_000).contains(&n), "{n}");
        let c = Config::parse("[limits]\nmax_client_connections = 123456\n").unwrap();
        assert_eq!(c.limits.max_client_connections, 123_456);
        // Without a file (`trove serve` alone) as with an empty one: a machine whose hard
        // limit is 20,000 warned at every start before (issue 20).
        assert_eq!(
            Config::without_file().limits.max_client_connections,
            Config::parse("").unwrap().limits.max_client_connections
        );
    }

    /// What can be checked on this machine is: a log or pid file trove could not create.
    #[test]
    fn log_and_pid_paths_are_checked() {
        let dir = std::env::temp_dir().join(format!("trove-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("access.log");
        Config::parse(&format!("[log]\naccess = {:?}\n", ok.to_str().unwrap())).unwrap();
        assert!(!ok.exists(), "checking creates nothing");
        let e = Config::parse(&format!("[log]\naccess = {:?}\n", dir.to_str().unwrap()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("log.access") && e.contains("is a directory"),
            "{e}"
        );
        let trace = dir.join("trace.jsonl");
        let c = Config::parse(&format!("[log]\ntrace = {:?}\n", trace.to_str().unwrap())).unwrap();
        assert_eq!(c.proxy_settings().log.trace, trace.to_str().unwrap());
        let e = Config::parse(&format!("[log]\ntrace = {:?}\n", dir.to_str().unwrap()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("log.trace") && e.contains("is a directory"),
            "{e}"
        );
        let e = Config::parse("[runtime]\npid_file = \"/nonexistent/trove.pid\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("runtime.pid_file") && e.contains("/nonexistent"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `[cache.disk]`: one path or a list, units required, bounds checked by name.
    #[test]
    fn disk_settings_are_checked_by_name() {
        let c = Config::parse("[cache.disk]\npath = \"/tmp/a\"\nsize = \"1GiB\"\n").unwrap();
        let d = c.proxy_settings().cache.disk.unwrap();
        assert_eq!(d.path, vec![std::path::PathBuf::from("/tmp/a")]);
        assert_eq!(d.size, 1 << 30);
        assert_eq!(d.sync_interval, std::time::Duration::from_secs(1));
        assert_eq!(d.region_size, 16 << 20);
        assert_eq!(d.reclaim.as_str(), "fifo-reinsert");
        let c = Config::parse(
            "[cache.disk]\npath = [\"/a\", \"/b\"]\nsize = \"1GiB\"\nsync_interval = \"250ms\"\nreclaim = \"fifo\"\n",
        )
        .unwrap();
        let d = c.proxy_settings().cache.disk.unwrap();
        assert_eq!(d.path.len(), 2);
        assert_eq!(d.reclaim.as_str(), "fifo");
        assert!(Config::parse("")
            .unwrap()
            .proxy_settings()
            .cache
            .disk
            .is_none());
        for (text, key) in [
            ("path = \"/a\"\nsize = 1000000000", "unit"),
            ("path = \"/a\"\nsize = \"1MiB\"", "cache.disk.size"),
            ("path = []\nsize = \"1GiB\"", "cache.disk.path"),
            (
                "path = \"/a\"\nsize = \"1GiB\"\nregion_size = \"1KiB\"",
                "cache.disk.region_size",
            ),
            (
                "path = \"/a\"\nsize = \"1GiB\"\nsync_interval = \"0s\"",
                "cache.disk.sync_interval",
            ),
            (
                "path = \"/a\"\nsize = \"1GiB\"\nreclaim = \"lru\"",
                "reclaim",
            ),
            ("size = \"1GiB\"", "path"),
        ] {
            let e = Config::parse(&format!("[cache.disk]\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn the_example_config_is_valid() {
        Config::parse(EXAMPLE).unwrap();
    }

    /// `[cache.disk] sendfile_min`: 64 KiB unless set; a size with its unit.
    #[test]
    fn disk_sendfile_min_has_a_default_and_reads_a_size() {
        let c = Config::parse("[cache.disk]\npath = \"/tmp/a\"\nsize = \"1GiB\"\n").unwrap();
        assert_eq!(
            c.proxy_settings().cache.disk.unwrap().sendfile_min,
            64 << 10
        );
        let c = Config::parse(
            "[cache.disk]\npath = \"/tmp/a\"\nsize = \"1GiB\"\nsendfile_min = \"1MiB\"\n",
        )
        .unwrap();
        assert_eq!(c.proxy_settings().cache.disk.unwrap().sendfile_min, 1 << 20);
    }
}
