//! Where the admin API is reachable with no configuration, safely: the Unix socket's
//! default place and, when no token is configured, a random token written where only
//! trove's user can read it and where `trove purge`, `put` … look for it.
//!
//! - The **runtime directory**: `$XDG_RUNTIME_DIR/trove` when that is set to a directory
//!   this user owns that nobody else may write to (a per-user directory the login manager
//!   makes, mode 0700; one owned by another user or writable by others is ignored: whoever
//!   can write there could swap `trove` for their own), else `/tmp/trove-<uid>` (in `$TMPDIR`
//!   when set). trove creates it with mode 0700 and refuses one that another user owns or
//!   others may enter, so nobody else can plant a file or a symlink where the token goes.
//! - The **default socket** (`[admin] socket = "auto"`, the default): `admin-<port>.sock` in
//!   the runtime directory, `<port>` the admin listener's (so several troves on one machine
//!   don't collide), mode 0600.
//! - The **generated token** (no `token` or `token_file`): 32 random bytes from the
//!   kernel (`/dev/urandom`) as hex, new at every start, kept across reloads, written with
//!   mode 0600 to `admin-<address>-<port>.token` in the runtime directory (by address too:
//!   two troves may use one port on two addresses) and beside the socket
//!   (`<socket>.token`), removed at a clean stop if it still holds this trove's token. A
//!   generated token that could be written nowhere stops the start (nobody could use the
//!   API), saying why.
//! - **Leftovers** of a trove that was killed (`kill -9`, a crash) are swept at the next
//!   start that uses the runtime directory: a default socket nothing listens on any more
//!   and older than [`STALE_AFTER`] goes, with its token files ([`sweep_stale`]).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The runtime directory (see the module docs); not created.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .filter(|d| safe_parent(Path::new(d)))
    {
        Some(d) => PathBuf::from(d).join("trove"),
        None => std::env::temp_dir().join(format!("trove-{}", rustix::process::geteuid().as_raw())),
    }
}

/// True for a directory this user owns that no one else may write to (issue 19, defect 10:
/// a `$XDG_RUNTIME_DIR` of another user's, mode 0777, was taken).
fn safe_parent(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| {
        m.is_dir() && m.uid() == rustix::process::geteuid().as_raw() && m.mode() & 0o022 == 0
    })
}

/// Creates the runtime directory (mode 0700) or checks the one there is ours alone.
pub fn ensure_private_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        anyhow::bail!(
            "{} must be a directory owned by this user (uid {me}) with mode 0700: it holds the admin API's socket and token",
            dir.display()
        );
    }
    Ok(())
}

/// The token file the CLI looks for when it reaches the API at `addr` over TCP: named by
/// the address and the port, so two troves on one port and two addresses keep theirs.
pub fn token_for(addr: std::net::SocketAddr) -> PathBuf {
    let ip = addr.ip().to_string().replace(':', "_");
    runtime_dir().join(format!("admin-{ip}-{}.token", addr.port()))
}

/// The name a trove before issue 19 wrote its token under (the port alone): read as a
/// fallback by the CLI, never written.
pub fn token_for_port(port: u16) -> PathBuf {
    runtime_dir().join(format!("admin-{port}.token"))
}

/// Removes a token file if it still holds `token` (another trove may have written its own
/// there since; that one is not ours to remove).
pub fn remove_token(path: &Path, token: &str) {
    if read_token(path).as_deref() == Some(token) {
        let _ = std::fs::remove_file(path);
    }
}

/// The token file beside a socket.
pub fn token_beside(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".token");
    PathBuf::from(name)
}

/// The socket `[admin] socket` names: `"auto"` the default place, `""` none.
pub fn socket_path(setting: &str, admin_port: Option<u16>) -> Option<PathBuf> {
    match setting {
        "" => None,
        "auto" => Some(runtime_dir().join(match admin_port {
            Some(p) => format!("admin-{p}.sock"),
            None => "admin.sock".to_string(),
        })),
        path => Some(PathBuf::from(path)),
    }
}

/// A socket file this old that refuses connections is a dead trove's; a younger one may
/// be a trove that has bound it and is about to listen.
pub const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// Removes from `dir` (the runtime directory, private to this user) every `admin-*.sock`
/// that is a socket nobody listens on and at least `min_age` old, with the token files
/// written beside it and for its port. Returns how many sockets went. Errors are ignored:
/// this is tidying, and a file that can't be removed is no danger.
pub fn sweep_stale(dir: &Path, min_age: std::time::Duration) -> usize {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut swept = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(addr) = name
            .strip_prefix("admin-")
            .and_then(|n| n.strip_suffix(".token"))
            .and_then(token_addr)
        {
            // A token for a TCP address nothing listens on any more: a dead trove's.
            let path = e.path();
            let old = std::fs::symlink_metadata(&path)
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age >= min_age);
            let refused = matches!(
                std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)),
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused
            );
            if old && refused {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        let Some(stem) = name
            .strip_prefix("admin-")
            .and_then(|n| n.strip_suffix(".sock"))
        else {
            continue;
        };
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age >= min_age);
        if !meta.file_type().is_socket() || !old {
            continue;
        }
        match std::os::unix::net::UnixStream::connect(&path) {
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused => {}
            _ => continue, // Alive, or not ours to judge.
        }
        if std::fs::remove_file(&path).is_ok() {
            swept += 1;
            let _ = std::fs::remove_file(token_beside(&path));
            let _ = std::fs::remove_file(dir.join(format!("admin-{stem}.token")));
        }
    }
    swept
}

/// The address in a token file's name (`<ip>-<port>`, `:` of IPv6 written `_`).
fn token_addr(stem: &str) -> Option<std::net::SocketAddr> {
    let (ip, port) = stem.rsplit_once('-')?;
    let ip: std::net::IpAddr = ip.replace('_', ":").parse().ok()?;
    Some(std::net::SocketAddr::new(ip, port.parse().ok()?))
}

/// A fresh random token: 32 bytes from the kernel, as hex.
pub fn generate_token() -> anyhow::Result<String> {
    let mut b = [0u8; 32];
    let mut f = std::fs::File::open("/dev/urandom").context("cannot open /dev/urandom")?;
    std::io::Read::read_exact(&mut f, &mut b).context("cannot read /dev/urandom")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Writes `token` to `path` with mode 0600 (a new file renamed into place, so a reader
/// never sees half of it and a file left there by someone else is not written through).
pub fn write_token(path: &Path, token: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    let written = f
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| writeln!(f, "{token}"))
        .with_context(|| format!("cannot write {}", tmp.display()))
        .and_then(|()| {
            std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
        });
    if written.is_err() {
        // Never leave the temporary file behind (issue 19, defect 10).
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Reads the first line of a token file.
pub fn read_token(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let t = text.lines().next()?.trim().to_string();
    (!t.is_empty()).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_written_for_the_owner_only() {
        let a = generate_token().unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, generate_token().unwrap());
        let dir = std::env::temp_dir().join(format!("trove-admin-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        let p = dir.join("admin-1.token");
        write_token(&p, &a).unwrap();
        assert_eq!(read_token(&p).as_deref(), Some(a.as_str()));
        let mode = std::fs::metadata(&p).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(ensure_private_dir(&dir).is_err(), "others may enter it");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            token_beside(Path::new("/run/t/a.sock")),
            PathBuf::from("/run/t/a.sock.token")
        );
        assert_eq!(socket_path("", Some(1)), None);
        assert!(socket_path("auto", Some(9090))
            .unwrap()
            .ends_with("admin-9090.sock"));
    }

    #[test]
    fn a_dead_troves_socket_and_tokens_are_swept_a_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("trove-admin-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        // A dead trove's: the listener is gone, its files remain.
        let dead = dir.join("admin-1.sock");
        drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
        write_token(&token_beside(&dead), "a").unwrap();
        write_token(&dir.join("admin-1.token"), "a").unwrap();
        // A live one, and a token of a TCP-only trove (no socket: nothing to judge it by).
        let live = dir.join("admin-2.sock");
        let _keep = std::os::unix::net::UnixListener::bind(&live).unwrap();
        write_token(&token_beside(&live), "b").unwrap();
        write_token(&dir.join("admin-3.token"), "c").unwrap();
        // Too young to judge.
        assert_eq!(sweep_stale(&dir, std::time::Duration::from_secs(3600)), 0);
        assert!(dead.exists());
        assert_eq!(sweep_stale(&dir, std::time::Duration::ZERO), 1);
        assert!(!dead.exists());
        assert!(!token_beside(&dead).exists());
        assert!(!dir.join("admin-1.token").exists());
        assert!(live.exists() && token_beside(&live).exists());
        assert!(dir.join("admin-3.token").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
