//! The peers `trove bench compare` measures, each as a reverse-proxy cache in front of the same
//! origin (as MEASURING.md asks: reverse mode is the one mode all five support), with a memory
//! cache of the same size. The configs are files in `peers/`, embedded here; `{{...}}`
//! placeholders are filled in at start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::proc::{free_port, temp_dir, Child};

const SQUID: &str = include_str!("../peers/squid.conf");
const VARNISH: &str = include_str!("../peers/varnish.vcl");
const NGINX: &str = include_str!("../peers/nginx.conf");
const TROVE: &str = include_str!("../peers/trove.toml");
const ATS_RECORDS: &str = include_str!("../peers/trafficserver.records.config");

/// The peers compare knows, in default order.
pub const NAMES: &[&str] = &["trove", "squid", "varnish", "nginx", "trafficserver"];

/// Where to find the programs.
#[derive(Debug, Clone)]
pub struct Programs {
    /// The trove binary (default: the running executable, when it is trove).
    pub trove: Option<PathBuf>,
}

/// A started peer.
pub struct Peer {
    /// Its name.
    pub name: String,
    /// The process.
    pub child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

fn fill(template: &str, port: u16, origin: SocketAddr, dir: &Path, mem_mb: u64) -> String {
    template
        .replace("{{PORT}}", &port.to_string())
        .replace("{{ORIGIN_HOST}}", &origin.ip().to_string())
        .replace("{{ORIGIN_PORT}}", &origin.port().to_string())
        .replace("{{DIR}}", &dir.display().to_string())
        .replace("{{MEM_MB}}", &mem_mb.to_string())
        .replace("{{MEM_BYTES}}", &(mem_mb << 20).to_string())
}

/// The program a peer needs, if it is installed.
pub fn program(name: &str, progs: &Programs) -> Option<PathBuf> {
    let bin = match name {
        "trove" => return progs.trove.clone().filter(|p| p.exists()),
        "squid" => "squid",
        "varnish" => "varnishd",
        "nginx" => "nginx",
        "trafficserver" => "traffic_server",
        _ => return None,
    };
    ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.exists())
}

/// Starts peer `name` in front of `origin` with a memory cache of `mem_mb` MiB.
pub fn start(
    name: &str,
    progs: &Programs,
    origin: SocketAddr,
    mem_mb: u64,
) -> anyhow::Result<Peer> {
    let bin = program(name, progs)
        .with_context(|| format!("{name} is not installed (or, for trove, pass --trove-bin)"))?;
    let bin = bin.display().to_string();
    let dir = temp_dir(name)?;
    let port = free_port()?;
    let write = |file: &str, text: &str| -> anyhow::Result<String> {
        let p = dir.join(file);
        std::fs::write(&p, fill(text, port, origin, &dir, mem_mb))?;
        Ok(p.display().to_string())
    };
    let d = dir.display().to_string();
    let mut env = Vec::new();
    let argv: Vec<String> = match name {
        "trove" => vec![
            bin,
            "serve".into(),
            "--config".into(),
            write("trove.toml", TROVE)?,
        ],
        "squid" => vec![bin, "-N".into(), "-f".into(), write("squid.conf", SQUID)?],
        "varnish" => vec![
            bin,
            "-F".into(),
            "-a".into(),
            format!("127.0.0.1:{port}"),
            "-f".into(),
            write("varnish.vcl", VARNISH)?,
            "-n".into(),
            format!("{d}/varnish"),
            "-s".into(),
            format!("malloc,{mem_mb}m"),
            "-p".into(),
            "thread_pools=1".into(),
        ],
        "nginx" => {
            std::fs::create_dir_all(dir.join("logs"))?;
            vec![
                bin,
                "-p".into(),
                format!("{d}/"),
                "-c".into(),
                write("nginx.conf", NGINX)?,
            ]
        }
        "trafficserver" => {
            copy_dir(Path::new("/etc/trafficserver"), &dir)?;
            write("records.config", ATS_RECORDS)?;
            let o = format!("http://{origin}/");
            std::fs::write(dir.join("remap.config"), format!("map {o} {o}\n"))?;
            std::fs::write(dir.join("storage.config"), format!("{d}/cache.db 256M\n"))?;
            // Traffic Server opens, but does not create, its cache file.
            std::fs::File::create(dir.join("cache.db"))?.set_len(256 << 20)?;
            env.push(("PROXY_CONFIG_CONFIG_DIR", d.clone()));
            env.push(("TS_ROOT", d.clone()));
            vec![bin]
        }
        _ => anyhow::bail!("unknown peer {name:?} (known: {})", NAMES.join(", ")),
    };
    let child = Child::spawn(name, &argv, &dir, &env)?;
    Ok(Peer {
        name: name.into(),
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    })
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            std::fs::create_dir_all(&dest)?;
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let origin: SocketAddr = "127.0.0.1:9".parse().unwrap();
        for t in [SQUID, VARNISH, NGINX, TROVE, ATS_RECORDS] {
            let out = fill(t, 1234, origin, Path::new("/tmp/x"), 64);
            assert!(!out.contains("{{"), "{out}");
            assert!(out.contains("1234"));
        }
    }
}
