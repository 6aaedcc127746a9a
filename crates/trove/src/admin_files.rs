//! Where the admin API is reachable with no configuration, safely: the Unix socket's
//! default place and, when no token is configured, a random token written where only
//! trove's user can read it and where `trove purge`, `put` … look for it.
//!
//! - The **runtime directory**: `$XDG_RUNTIME_DIR/trove` when that is set (a per-user
//!   directory the login manager makes, mode 0700), else `/tmp/trove-<uid>`. trove creates
//!   it with mode 0700 and refuses one that another user owns or others may enter, so
//!   nobody else can plant a file or a symlink where the token goes.
//! - The **default socket** (`[admin] socket = "auto"`, the default): `admin-<port>.sock` in
//!   the runtime directory, `<port>` the admin listener's (so several troves on one machine
//!   don't collide), mode 0600.
//! - The **generated token** (no `token` or `token_file`): 32 random bytes from the
//!   kernel (`/dev/urandom`) as hex, new at every start, kept across reloads, written with
//!   mode 0600 to `admin-<port>.token` in the runtime directory and beside the socket
//!   (`<socket>.token`), removed at a clean stop.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The runtime directory (see the module docs); not created.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("trove"),
        None => std::env::temp_dir().join(format!("trove-{}", rustix::process::geteuid().as_raw())),
    }
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

/// The token file the CLI looks for when it reaches the API at `port` over TCP.
pub fn token_for_port(port: u16) -> PathBuf {
    runtime_dir().join(format!("admin-{port}.token"))
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
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    writeln!(f, "{token}").with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
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
}
