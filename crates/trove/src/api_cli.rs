//! `trove put`, `get`, `delete`, `purge`, `list`, `stats`, `bans`: the admin API from the
//! command line, through `trove-client`, so an operator's script needs no curl. Answers
//! are printed as JSON (a get prints the stored body); a refusal exits 1 with the API's
//! error code and message.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use trove_client::{wire, Client, Endpoint, PutOptions};

/// Where the API is and the token.
#[derive(clap::Args, Debug)]
pub struct Conn {
    /// The admin listener: `127.0.0.1:9090` or a Unix socket path (`unix:/run/trove.sock`).
    /// Default: the config's `[admin] listen` with --config, else 127.0.0.1:9090.
    #[arg(long, env = "TROVE_API")]
    api: Option<String>,
    /// The config file `trove serve` runs with: its `[admin] listen` (or `socket`) says
    /// where the API is, and its `token` or `token_file` the token.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The bearer token (`[admin] token`). Without it or --token-file, the token a
    /// `trove serve` without one generated is read (beside the socket, or for a TCP
    /// address from trove's runtime directory: `admin-<port>.token`).
    #[arg(long, env = "TROVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file holding the token (its first line).
    #[arg(long)]
    token_file: Option<PathBuf>,
}

/// A connection to the API, and where it goes (for messages).
struct Api {
    client: Client,
    at: String,
    rt: tokio::runtime::Runtime,
}

impl Api {
    /// Runs one call. A refusal is the API's own message; anything else (nothing listening,
    /// a timeout) says where it tried.
    fn run<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, trove_client::ClientError>>,
    ) -> anyhow::Result<T> {
        self.rt.block_on(call).map_err(|e| match e {
            e @ trove_client::ClientError::Api { .. } => anyhow::Error::from(e),
            e => anyhow::anyhow!(
                "admin API at {}: {e} (is trove serve running there? --api or --config say where it is)",
                self.at
            ),
        })
    }
}

impl Conn {
    fn open(&self) -> anyhow::Result<Api> {
        let config = match &self.config {
            Some(path) => Some(crate::config::Config::load(path)?),
            None => None,
        };
        let api = match (&self.api, &config) {
            (Some(a), _) => a.clone(),
            (None, Some(c)) => match c.admin_addr()? {
                Some(addr) => addr.to_string(),
                None => match crate::admin_files::socket_path(&c.admin.socket, None) {
                    Some(path) => format!("unix:{}", path.display()),
                    None => anyhow::bail!(
                        "{}: [admin] listen and socket are both off: no API to reach",
                        self.config
                            .as_ref()
                            .map_or(String::new(), |p| p.display().to_string())
                    ),
                },
            },
            (None, None) => "127.0.0.1:9090".to_string(),
        };
        let endpoint: Endpoint = api.parse().map_err(|e: String| anyhow::anyhow!(e))?;
        let token = match (&self.token, &self.token_file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(f)) => Some(
                std::fs::read_to_string(f)
                    .with_context(|| format!("cannot read {}", f.display()))?
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string(),
            ),
            (None, None) => match config.as_ref().map(|c| c.admin_token()).transpose()? {
                Some(Some(t)) => Some(t),
                _ => generated_token(&api),
            },
        };
        Ok(Api {
            client: Client::new(endpoint, token.as_deref()),
            at: api,
            rt: runtime()?,
        })
    }
}

/// The token a `trove serve` generated for the API at `api` (see `admin_files`), if any.
fn generated_token(api: &str) -> Option<String> {
    let endpoint: Endpoint = api.parse().ok()?;
    let file = match endpoint {
        Endpoint::Unix(path) => crate::admin_files::token_beside(&path),
        Endpoint::Tcp(addr) => {
            return crate::admin_files::read_token(&crate::admin_files::token_for(addr)).or_else(
                || crate::admin_files::read_token(&crate::admin_files::token_for_port(addr.port())),
            )
        }
    };
    crate::admin_files::read_token(&file)
}

#[derive(clap::Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    conn: Conn,
    /// The URL to store the object under (`http://host/path`).
    url: String,
    /// The body: a file, or `-` (the default) for standard input.
    #[arg(long, default_value = "-")]
    file: String,
    /// Freshness lifetime in seconds (default: until invalidated).
    #[arg(long)]
    ttl: Option<u64>,
    /// A tag (repeat for more).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// A configured named cache.
    #[arg(long)]
    cache: Option<String>,
    /// The stored response's `Content-Type` (default: none).
    #[arg(long)]
    content_type: Option<String>,
    /// The stored response's status code (default: 200).
    #[arg(long)]
    status: Option<u16>,
    /// Another stored response field, `Name: value` (repeat for more).
    #[arg(long = "header")]
    headers: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    conn: Conn,
    /// The stored object's URL (`http://host/path`).
    url: String,
    /// Print every variant's metadata (JSON) instead of the body.
    #[arg(long)]
    meta: bool,
}

#[derive(clap::Args, Debug)]
pub struct UrlArgs {
    #[command(flatten)]
    conn: Conn,
    /// The stored object's URL (`http://host/path`).
    url: String,
}

#[derive(clap::Args, Debug)]
#[group(required = true, multiple = false, id = "what")]
pub struct PurgeArgs {
    #[command(flatten)]
    conn: Conn,
    /// One URL, every variant.
    #[arg(long, group = "what")]
    url: Option<String>,
    /// Every object carrying this tag.
    #[arg(long, group = "what")]
    tag: Option<String>,
    /// Every object in this named cache.
    #[arg(long, group = "what")]
    cache: Option<String>,
    /// Every URL under this prefix.
    #[arg(long, group = "what")]
    prefix: Option<String>,
    /// A ban: `SUBJECT OP VALUE`, e.g. `url ~ \.css$` or `header:X-Kind == page`.
    #[arg(long, group = "what")]
    ban: Option<String>,
    /// Mark stale (stale-while-revalidate and stale-if-error apply) instead of removing.
    #[arg(long)]
    soft: bool,
    /// In a cluster with a bus: wait up to this many milliseconds for every live node to
    /// apply it (the answer's `not_applied_by` names those that did not).
    #[arg(long, value_name = "MS")]
    wait_ms: Option<u64>,
}

#[derive(clap::Args, Debug)]
#[group(required = true, multiple = false, id = "which")]
pub struct ListArgs {
    #[command(flatten)]
    conn: Conn,
    /// The objects carrying this tag.
    #[arg(long, group = "which")]
    tag: Option<String>,
    /// The objects in this named cache.
    #[arg(long, group = "which")]
    cache: Option<String>,
    /// Every named cache with its count.
    #[arg(long, group = "which")]
    caches: bool,
    /// At most this many URLs.
    #[arg(long, default_value_t = 100)]
    limit: usize,
}

#[derive(clap::Args, Debug)]
pub struct ConnOnly {
    #[command(flatten)]
    conn: Conn,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub fn put(a: PutArgs) -> anyhow::Result<()> {
    let mut body = Vec::new();
    if a.file == "-" {
        std::io::stdin().read_to_end(&mut body)?;
    } else {
        body = std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file))?;
    }
    let mut fields = Vec::new();
    for h in &a.headers {
        let (n, v) = h
            .split_once(':')
            .ok_or_else(|| anyhow::anyhow!("--header {h:?}: expected \"Name: value\""))?;
        fields.push((n.trim().to_string(), v.trim().to_string()));
    }
    let opts = PutOptions {
        ttl: a.ttl.map(Duration::from_secs),
        tags: a.tags,
        cache: a.cache,
        status: a.status,
        content_type: a.content_type,
        fields,
    };
    let api = a.conn.open()?;
    let ack = api.run(api.client.put(&a.url, body.into(), &opts))?;
    print_json(&ack)
}

pub fn get(a: GetArgs) -> anyhow::Result<()> {
    let api = a.conn.open()?;
    if a.meta {
        return print_json(&api.run(api.client.meta(&a.url))?);
    }
    match api.run(api.client.get(&a.url))? {
        Some(s) => {
            let _ = std::io::stdout().write_all(&s.body);
            Ok(())
        }
        None => anyhow::bail!("nothing stored for {}", a.url),
    }
}

pub fn delete(a: UrlArgs) -> anyhow::Result<()> {
    let api = a.conn.open()?;
    print_json(&api.run(api.client.delete(&a.url))?)
}

pub fn purge(a: PurgeArgs) -> anyhow::Result<()> {
    let mode = if a.soft {
        wire::Mode::Soft
    } else {
        wire::Mode::Hard
    };
    let ban = match &a.ban {
        Some(b) => {
            let mut parts = b.trim().splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(s), Some(o), Some(v)) => Some(wire::BanPattern {
                    subject: s.into(),
                    op: o.into(),
                    value: v.trim().into(),
                }),
                _ => anyhow::bail!("--ban {b:?}: expected \"SUBJECT OP VALUE\""),
            }
        }
        None => None,
    };
    let call = wire::Invalidate {
        url: a.url,
        tag: a.tag,
        cache: a.cache,
        prefix: a.prefix,
        ban,
        mode,
    };
    let api = a.conn.open()?;
    print_json(&api.run(api.client.invalidate_waiting(&call, a.wait_ms))?)
}

pub fn list(a: ListArgs) -> anyhow::Result<()> {
    let api = a.conn.open()?;
    if let Some(t) = &a.tag {
        return print_json(&api.run(api.client.tag(t, a.limit))?);
    }
    if let Some(n) = &a.cache {
        return print_json(&api.run(api.client.cache(n, a.limit))?);
    }
    print_json(&api.run(api.client.caches())?)
}

pub fn stats(a: ConnOnly) -> anyhow::Result<()> {
    let api = a.conn.open()?;
    print_json(&api.run(api.client.stats())?)
}

/// `trove cluster status`: the cluster as the node behind the admin API sees it.
pub fn cluster_status(a: ConnOnly) -> anyhow::Result<()> {
    let api = a.conn.open()?;
    print_json(&api.run(api.client.cluster(None))?)
}

#[derive(clap::Args, Debug)]
pub struct OwnerArgs {
    /// The absolute URL (`http://host/path`).
    url: String,
    #[command(flatten)]
    conn: Conn,
}

/// `trove cluster owner URL`: the node that owns a URL now (where a put for it goes in shard
/// mode), as `id addr`.
pub fn cluster_owner(a: OwnerArgs) -> anyhow::Result<()> {
    let api = a.conn.open()?;
    let c = api.run(api.client.cluster(Some(&a.url)))?;
    let owner = c.owner.unwrap_or_default();
    let addr = c
        .nodes
        .iter()
        .find(|n| n.id == owner)
        .map_or("", |n| n.addr.as_str());
    println!("{owner} {addr}");
    Ok(())
}

pub fn bans(a: ConnOnly) -> anyhow::Result<()> {
    let api = a.conn.open()?;
    print_json(&api.run(api.client.bans())?)
}
