//! Issue 19 in a real `trove serve` child process: the admin surface as an attacker finds
//! it (what an object's tags cost, silent connections, a large object read through the
//! API, put parameters, token files). Each test is named after its defect.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{TempDir, Trove};

const TOKEN: &str = "s3cret";

/// One admin API call over TCP on a new connection: `(status, body)`.
fn api(admin: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let status = String::from_utf8_lossy(&out[..out.len().min(16)])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let at = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(out.len(), |p| p + 4);
    (status, out[at..].to_vec())
}

/// A JSON number field of a flat object (`"name":123`).
fn json_u64(body: &[u8], name: &str) -> u64 {
    let text = String::from_utf8_lossy(body);
    let key = format!("\"{name}\":");
    text.split_once(&key)
        .and_then(|(_, rest)| {
            rest.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or_else(|| panic!("{name} in {text}"))
}

/// The child's resident set, in bytes.
fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A forward trove with an admin listener on TCP and the token `TOKEN`; `more` is appended
/// (further tables).
fn config(memory: &str, more: &str) -> String {
    format!(
        "[[listener]]\naddr = \"127.0.0.1:0\"\nmode = \"forward\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n\
         [cache]\nmemory = \"{memory}\"\n{more}"
    )
}

/// Issue 19, defect 4: everything an object costs is charged to the memory budget. 3,000
/// puts of 10 bytes with 64 tags of 250 bytes each into a 16 MiB memory tier: the store
/// counts what they hold, stays within its budget by evicting (before: all 3,000 were
/// kept, counted as 1.6 MB, while they took 187 MiB), and the process's memory stays near
/// the budget.
#[test]
fn issue_19_tags_are_charged_to_the_memory_budget() {
    let dir = TempDir::new("abuse-tags");
    let t = Trove::start(&dir, &config("16MiB", ""));
    let admin = t.admin();
    let before = rss_of(t.child.id());
    let filler = "x".repeat(240);
    for i in 0..3_000 {
        let mut path = format!("/v1/object?url=http://tagged.test/{i}");
        for j in 0..64 {
            path.push_str(&format!("&tag=t{i:05}-{j:02}-{filler}"));
        }
        let (status, body) = api(&admin, "PUT", &path, b"0123456789");
        assert_eq!(status, 201, "put {i}: {}", String::from_utf8_lossy(&body));
    }
    let (status, stats) = api(&admin, "GET", "/v1/stats", b"");
    assert_eq!(status, 200);
    let (objects, bytes, capacity) = (
        json_u64(&stats, "objects"),
        json_u64(&stats, "bytes"),
        json_u64(&stats, "capacity"),
    );
    let grown = rss_of(t.child.id()).saturating_sub(before);
    eprintln!("{objects} objects kept, {bytes} bytes counted of {capacity}; RSS grew {grown}");
    assert!(bytes <= capacity, "within the budget: {bytes} > {capacity}");
    assert!(
        objects < 3_000,
        "the tags' cost made room by evicting: {objects} objects in {bytes} bytes"
    );
    assert!(bytes > capacity / 2, "their cost is counted: {bytes}");
    assert!(grown < 96 << 20, "RSS grew {grown} bytes");
}

/// Issue 19, defect 5: silent connections to the admin listener can't take trove's
/// descriptors. Under `ulimit -n 1024`, 1,000 connections that never send a byte: trove
/// keeps at most its admin share of them (the rest are closed at once), proxy requests go
/// on being served while they are held, and the ones kept are closed within the header
/// timeout, so `/metrics` answers again. (Before: all were kept, without end, and took
/// every descriptor.)
#[test]
fn issue_19_silent_admin_connections_are_capped_and_timed_out() {
    let dir = TempDir::new("abuse-silent");
    let (origin, _) = common::origin_with(|_| common::cacheable(b"hello", 60, None));
    let t = Trove::start_with_nofile(&dir, &config("16MiB", ""), 1024);
    let (proxy, admin) = (t.proxy(), t.admin());
    let mut held = Vec::new();
    for _ in 0..1_000 {
        match TcpStream::connect(&admin) {
            Ok(s) => held.push(s),
            Err(e) => panic!("connect: {e}"),
        }
    }
    let get = || {
        common::request(
            &proxy,
            &format!(
                "GET http://{origin}/x HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n"
            ),
        )
    };
    let answer = get();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the proxy serves while the admin connections are held: {answer:?}"
    );
    // How many trove still holds open.
    let open = |held: &mut Vec<TcpStream>| {
        let mut n = 0;
        for s in held.iter_mut() {
            s.set_nonblocking(true).unwrap();
            let mut b = [0u8; 256];
            if matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock) {
                n += 1;
            }
        }
        n
    };
    // A connection trove has not accepted yet (still in the listen queue) looks open too:
    // wait for trove to have accepted them all and closed those past its share (a fixed
    // pause could end first on a loaded host), well within the header timeout, so one
    // that kept them all until then still fails here.
    common::wait_for(trove_admin::HEADER_TIMEOUT / 2, || open(&mut held) <= 40);
    let kept = open(&mut held);
    assert!(kept <= 40, "{kept} silent admin connections kept open");
    assert!(
        common::wait_for(Duration::from_secs(20), || open(&mut held) == 0),
        "the kept ones are closed within the header timeout: {} open",
        open(&mut held)
    );
    assert!(common::metrics_text(&admin).contains("trove_requests_total"));
    assert!(get().starts_with("HTTP/1.1 200"));
}

/// Issue 19, defect 6: `GET /v1/object` of a large object kept on disk (spooled) streams
/// it: trove's memory stays flat while a 128 MiB body is read through the API, byte for
/// byte. (Before: the API read it whole first; 500 MiB raised RSS from 64 to 824 MiB.)
#[test]
fn issue_19_the_api_streams_a_large_object() {
    const LEN: usize = 128 << 20;
    let body: std::sync::Arc<Vec<u8>> =
        std::sync::Arc::new((0..LEN).map(|i| (i % 251) as u8).collect());
    let b = std::sync::Arc::clone(&body);
    let (origin, _) = common::origin_with(move |_| common::cacheable(&b, 3600, None));
    let dir = TempDir::new("abuse-stream");
    let disk = dir.join("cache");
    let more = format!(
        "max_object = \"8MiB\"\n[cache.disk]\npath = \"{}\"\nsize = \"512MiB\"\n",
        disk.display()
    );
    let t = Trove::start(&dir, &config("32MiB", &more));
    let (proxy, admin) = (t.proxy(), t.admin());
    let mut s = TcpStream::connect(&proxy).unwrap();
    write!(
        s,
        "GET http://{origin}/big HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert!(got.len() > LEN, "fetched through the proxy");
    drop(got);
    assert!(
        common::wait_for(Duration::from_secs(30), || common::metric(
            &admin,
            "trove_disk_writes_total"
        ) >= 1.0),
        "written to disk"
    );
    let pid = t.child.id();
    let before = rss_of(pid);
    let mut s = TcpStream::connect(&admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /v1/object?url=http://{origin}/big HTTP/1.1\r\nHost: admin\r\n\
         Authorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    // Read slowly at first, sampling trove's memory, then the rest.
    let mut out = Vec::with_capacity(LEN + 4096);
    let mut buf = vec![0u8; 1 << 20];
    let mut peak = before;
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.len() < 32 << 20 {
            std::thread::sleep(Duration::from_millis(2));
        }
        peak = peak.max(rss_of(pid));
    }
    let at = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let head = String::from_utf8_lossy(&out[..at]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-length: {LEN}")),
        "{head}"
    );
    assert!(out[at..] == body[..], "byte for byte");
    let grown = peak.saturating_sub(before);
    eprintln!("RSS {before} before, {peak} at its peak while streaming");
    assert!(grown < 48 << 20, "RSS grew {grown} bytes");
}

/// `trove <cmd> --config <file>` with `env`: (success, stdout + stderr).
fn cli(args: &[&str], env: &[(&str, &std::path::Path)]) -> (bool, String) {
    let mut cmd = common::trove();
    cmd.args(args).env_remove("TROVE_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A config with no token (one is generated) and no socket, the admin API on `admin`.
fn generated_token_config(admin: &str) -> String {
    format!(
        "[[listener]]\naddr = \"127.0.0.1:0\"\nmode = \"forward\"\n\
         [admin]\nlisten = \"{admin}\"\nsocket = \"\"\n"
    )
}

/// A private directory for a test's `$XDG_RUNTIME_DIR` / `$TMPDIR` (mode 0700).
fn private_dir(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
    p
}

/// Issue 19, defect 10: two troves with one admin port on two addresses keep a token file
/// each; the second one's start and clean stop leave the first one's alone, so its CLI
/// still gets in. (Before: the second overwrote `admin-<port>.token`, then deleted it.)
#[test]
fn issue_19_two_troves_on_one_port_keep_their_own_token_files() {
    let dir = TempDir::new("abuse-tokens");
    let run = private_dir(&dir, "run");
    let tmp = private_dir(&dir, "tmp");
    let env = [
        ("XDG_RUNTIME_DIR", run.as_path()),
        ("TMPDIR", tmp.as_path()),
    ];
    let port = common::free_port().rsplit(':').next().unwrap().to_string();
    let (one, two) = (dir.join("one"), dir.join("two"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    let first = Trove::try_start_env(
        &one,
        &generated_token_config(&format!("127.0.0.1:{port}")),
        &env,
    )
    .unwrap();
    let stats = |conf: &std::path::Path| cli(&["stats", "--config", conf.to_str().unwrap()], &env);
    let (ok, out) = stats(&first.config);
    assert!(ok, "the first trove's CLI: {out}");
    let mut second = Trove::try_start_env(
        &two,
        &generated_token_config(&format!("127.0.0.2:{port}")),
        &env,
    )
    .unwrap();
    let (ok, out) = stats(&second.config);
    assert!(ok, "the second trove's CLI: {out}");
    let (ok, out) = stats(&first.config);
    assert!(ok, "the first trove's CLI with the second running: {out}");
    // A clean stop of the second.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &second.child.id().to_string()])
        .status();
    assert!(second.wait_exit(Duration::from_secs(20)).is_some());
    let (ok, out) = stats(&first.config);
    assert!(ok, "the first trove's CLI after the second stopped: {out}");
}

/// Issue 19, defect 10: a `$XDG_RUNTIME_DIR` others may write to is not used (its `trove`
/// directory could be swapped for someone else's); the token goes to the `$TMPDIR`
/// fallback instead. (Before: a mode-0777 runtime directory was accepted.)
#[test]
fn issue_19_a_runtime_dir_others_may_write_to_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("abuse-xdg");
    let run = private_dir(&dir, "run");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
    let tmp = private_dir(&dir, "tmp");
    let env = [
        ("XDG_RUNTIME_DIR", run.as_path()),
        ("TMPDIR", tmp.as_path()),
    ];
    let t = Trove::try_start_env(&dir, &generated_token_config("127.0.0.1:0"), &env).unwrap();
    // Written after the proxy's listener line: waited for.
    let file = t
        .wait_line(|l| l.starts_with("admin token in "))
        .and_then(|l| l.strip_prefix("admin token in ").map(str::to_string))
        .expect("a token file");
    assert!(
        file.starts_with(tmp.to_str().unwrap()),
        "not in the unsafe {}: {file}",
        run.display()
    );
    assert!(
        !run.join("trove").exists(),
        "nothing made in the unsafe directory"
    );
}

/// Issue 19, defect 10: a runtime directory trove must refuse (here made first, mode 0755,
/// as another local user could) with no token configured stops the start with a reason:
/// the generated token would be written nowhere. (Before: trove ran, said the API was on
/// TCP, and nobody had its token.) And a failed token write leaves no temporary file.
#[test]
fn issue_19_a_token_written_nowhere_stops_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("abuse-refused");
    let tmp = private_dir(&dir, "tmp");
    let uid = std::fs::metadata(&tmp).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid()
    });
    let taken = tmp.join(format!("trove-{}", uid.unwrap()));
    std::fs::create_dir_all(&taken).unwrap();
    std::fs::set_permissions(&taken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = [
        ("TMPDIR", tmp.as_path()),
        ("XDG_RUNTIME_DIR", std::path::Path::new("")),
    ];
    // It may print its proxy listener before it finds it has nowhere for the token.
    let err = match Trove::try_start_env(&dir, &generated_token_config("127.0.0.1:0"), &env) {
        Err(e) => e,
        Ok(mut t) => {
            let status = t.wait_exit(Duration::from_secs(10));
            assert!(
                status.is_some_and(|s| !s.success()),
                "the start fails: {status:?} {:?}",
                t.lines()
            );
            std::thread::sleep(Duration::from_millis(100));
            t.lines().join("\n")
        }
    };
    assert!(err.contains("written nowhere"), "{err}");
    assert!(err.contains("mode 0700"), "{err}");
    // A socket whose token file can't be written (a directory is in its place): the write
    // fails, and its temporary file is gone.
    std::fs::set_permissions(&taken, std::fs::Permissions::from_mode(0o700)).unwrap();
    let sock = dir.join("api.sock");
    std::fs::create_dir_all(dir.join("api.sock.token")).unwrap();
    let conf = format!(
        "[[listener]]\naddr = \"127.0.0.1:0\"\nmode = \"forward\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\nsocket = \"{}\"\n",
        sock.display()
    );
    let t = Trove::try_start_env(&dir, &conf, &env).unwrap();
    assert!(
        t.wait_line(|l| l.contains("api.sock.token")).is_some(),
        "{:?}",
        t.lines()
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Issue 19, defect 11: an unusable disk directory (a regular file; a path under a regular
/// file, which can't be made) fails `trove serve --check` and stops `trove serve` with the
/// reason, unless `[cache.disk] on_failure = "memory"`: then trove runs on memory and
/// `/healthz` and the status page say it is degraded. (Before: `--check` passed, and
/// `serve` ran memory-only after one log line while `/healthz` said ok.)
#[test]
fn issue_19_an_unusable_disk_directory_fails_the_check_and_the_start() {
    let dir = TempDir::new("abuse-baddisk");
    let file = dir.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    for (path, why) in [
        (file.clone(), "is not a directory"),
        (file.join("sub"), "can't be created"),
    ] {
        let disk = format!(
            "[cache.disk]\npath = \"{}\"\nsize = \"64MiB\"\nregion_size = \"1MiB\"\n",
            path.display()
        );
        let conf = config("16MiB", &disk);
        std::fs::write(dir.join("check.toml"), &conf).unwrap();
        let (ok, out) = cli(
            &[
                "serve",
                "--check",
                "--config",
                dir.join("check.toml").to_str().unwrap(),
            ],
            &[],
        );
        assert!(!ok, "--check fails for {}: {out}", path.display());
        assert!(
            out.contains("cache.disk.path") && out.contains(why),
            "{out}"
        );
        let err = Trove::try_start(&dir, &conf)
            .err()
            .expect("the start fails");
        assert!(
            err.contains("cache.disk") && err.contains("on_failure"),
            "{err}"
        );
    }
    let disk = format!(
        "[cache.disk]\npath = \"{}\"\nsize = \"64MiB\"\nregion_size = \"1MiB\"\n\
         on_failure = \"memory\"\n",
        file.display()
    );
    let t = Trove::start(&dir, &config("16MiB", &disk));
    let admin = t.admin();
    let health = common::request(
        &admin,
        "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.contains("degraded: the disk tier"), "{health}");
    let page = common::request(
        &admin,
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(page.contains("Degraded:"), "the status page says so");
}
