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
    #[arg(long, env = "TROVE_API", default_value = "127.0.0.1:9090")]
    api: String,
    /// The bearer token (`[admin] token`). Without it or --token-file, the token a
    /// `trove serve` without one generated is read (beside the socket, or for a TCP
    /// address from trove's runtime directory: `admin-<port>.token`).
    #[arg(long, env = "TROVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file holding the token (its first line).
    #[arg(long)]
    token_file: Option<PathBuf>,
}

impl Conn {
    fn client(&self) -> anyhow::Result<Client> {
        let endpoint: Endpoint = self.api.parse().map_err(|e: String| anyhow::anyhow!(e))?;
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
            (None, None) => generated_token(&self.api),
        };
        Ok(Client::new(endpoint, token.as_deref()))
    }
}

/// The token a `trove serve` generated for the API at `api` (see `admin_files`), if any.
fn generated_token(api: &str) -> Option<String> {
    let endpoint: Endpoint = api.parse().ok()?;
    let file = match endpoint {
        Endpoint::Unix(path) => crate::admin_files::token_beside(&path),
        Endpoint::Tcp(addr) => crate::admin_files::token_for_port(addr.port()),
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
    #[arg(long)]
    content_type: Option<String>,
    #[arg(long)]
    status: Option<u16>,
    /// Another stored response field, `Name: value` (repeat for more).
    #[arg(long = "header")]
    headers: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct UrlArgs {
    #[command(flatten)]
    conn: Conn,
    url: String,
    /// Print every variant's metadata (JSON) instead of the body.
    #[arg(long)]
    meta: bool,
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
    let c = a.conn.client()?;
    let ack = runtime()?.block_on(c.put(&a.url, body.into(), &opts))?;
    print_json(&ack)
}

pub fn get(a: UrlArgs) -> anyhow::Result<()> {
    let c = a.conn.client()?;
    let rt = runtime()?;
    if a.meta {
        return print_json(&rt.block_on(c.meta(&a.url))?);
    }
    match rt.block_on(c.get(&a.url))? {
        Some(s) => {
            let _ = std::io::stdout().write_all(&s.body);
            Ok(())
        }
        None => anyhow::bail!("nothing stored for {}", a.url),
    }
}

pub fn delete(a: UrlArgs) -> anyhow::Result<()> {
    let c = a.conn.client()?;
    print_json(&runtime()?.block_on(c.delete(&a.url))?)
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
    let c = a.conn.client()?;
    print_json(&runtime()?.block_on(c.invalidate(&call))?)
}

pub fn list(a: ListArgs) -> anyhow::Result<()> {
    let c = a.conn.client()?;
    let rt = runtime()?;
    if let Some(t) = &a.tag {
        return print_json(&rt.block_on(c.tag(t, a.limit))?);
    }
    if let Some(n) = &a.cache {
        return print_json(&rt.block_on(c.cache(n, a.limit))?);
    }
    print_json(&rt.block_on(c.caches())?)
}

pub fn stats(a: ConnOnly) -> anyhow::Result<()> {
    let c = a.conn.client()?;
    print_json(&runtime()?.block_on(c.stats())?)
}

pub fn bans(a: ConnOnly) -> anyhow::Result<()> {
    let c = a.conn.client()?;
    print_json(&runtime()?.block_on(c.bans())?)
}
