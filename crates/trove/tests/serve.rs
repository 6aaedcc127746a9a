//! The `trove` program as a user runs it: started from the command line with a config file,
//! used as a forward proxy, watched through its access log and `/metrics`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{cacheable, origin_with, request, trove, wait_for, TempDir, Trove};

/// A forward proxy with an admin listener on ports of its own.
fn start(dir: &TempDir, extra: &str) -> Trove {
    Trove::start(
        dir.path(),
        &format!(
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"forward\"\n[admin]\nlisten = \"127.0.0.1:0\"\n{extra}"
        ),
    )
}

#[test]
fn forward_proxy_fetch_twice_second_is_a_hit_in_the_access_log() {
    let (origin, hits) =
        origin_with(|_| cacheable(b"hello from the origin\n", 300, Some("text/plain")));
    let dir = TempDir::new("serve-hit");
    let log = dir.path().join("access.log");
    let trove = start(&dir, &format!("[log]\naccess = \"{}\"\n", log.display()));
    let (proxy, admin) = (trove.proxy(), trove.admin());
    let req =
        format!("GET http://{origin}/page HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n");
    let first = request(&proxy, &req);
    let second = request(&proxy, &req);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(second.ends_with("hello from the origin\n"), "{second}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert!(wait_for(Duration::from_secs(5), || common::read_lines(
        &log
    )
    .lines()
    .count()
        >= 2));
    let text = common::read_lines(&log);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains(" TCP_MISS/200 "), "{}", lines[0]);
    assert!(lines[1].contains(" TCP_MEM_HIT/200 "), "{}", lines[1]);
    assert!(lines[1].contains(&format!("GET http://{origin}/page")));

    let metrics = request(
        &admin,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(metrics.contains("trove_hits_total 1"), "{metrics}");
    let page = request(
        &admin,
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(
        page.contains("hit ratio, last minute (50.0% since start)"),
        "{page}"
    );
}

#[test]
fn unknown_config_key_is_refused_with_its_name() {
    let dir = TempDir::new("serve-unknown-key");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[cache]\nmemroy = \"1GiB\"\n").unwrap();
    let out = trove()
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("memroy"), "{err}");
}

#[test]
fn check_accepts_the_shipped_example_config() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../trove.example.toml");
    let out = trove()
        .args(["serve", "--check", "--config", example])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `trove serve --check` with `key = "0s"` in `[section]`: the error must name the key.
fn check_refuses_zero(section: &str, key: &str) {
    let dir = TempDir::new(&format!("serve-zero-{section}-{key}"));
    let path = dir.path().join(format!("zero-{key}.toml"));
    std::fs::write(&path, format!("[{section}]\n{key} = \"0s\"\n")).unwrap();
    let out = trove()
        .args(["serve", "--check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{section}.{key} = 0s accepted: {err}"
    );
    assert!(err.contains(&format!("{section}.{key}")), "{err}");
    assert!(err.contains("greater than 0"), "{err}");
}

#[test]
fn zero_durations_are_refused_with_their_names() {
    check_refuses_zero("origin_pool", "idle_timeout");
    for key in [
        "client_idle",
        "client_head",
        "connect",
        "origin_response",
        "origin_body",
        "client_write",
    ] {
        check_refuses_zero("timeouts", key);
    }
}

/// `idle_timeout = "0s"` used to start serving with a panicked pool reaper
/// (`tokio::time::interval(0)`); it must be refused before anything listens.
#[test]
fn zero_origin_pool_idle_timeout_is_refused_at_start_up_without_a_panic() {
    let dir = TempDir::new("serve-zero-idle");
    let path = dir.path().join("zero-idle.toml");
    std::fs::write(
        &path,
        "[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"forward\"\n[admin]\nlisten = \"\"\n[origin_pool]\nidle_timeout = \"0s\"\n",
    )
    .unwrap();
    let mut child = trove()
        .args(["serve", "--config"])
        .arg(&path)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Read stderr to its end, or until trove says it is listening (it must not).
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut err = String::new();
    let mut listening = false;
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        err.push_str(&line);
        if line.starts_with("listening ") {
            listening = true;
            break;
        }
    }
    if listening {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    assert!(!listening, "trove started serving: {err}");
    assert!(!status.success(), "{err}");
    assert!(err.contains("origin_pool.idle_timeout"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// SSRF (issue 7): `GET http://127.0.0.1:<admin>/metrics` through the forward proxy used to
/// be served; trove's own admin listener is refused as a destination, even to a local
/// client.
#[test]
fn the_admin_listener_is_not_reachable_through_the_forward_proxy() {
    let dir = TempDir::new("serve-admin-ssrf");
    let trove = start(&dir, "[log]\naccess = \"\"\n");
    let admin = &trove.admin();
    let port = admin.rsplit(':').next().unwrap();
    for url in [
        format!("http://{admin}/metrics"),
        format!("http://127.1:{port}/metrics"),
        format!("http://localhost:{port}/metrics"),
    ] {
        let r = request(
            &trove.proxy(),
            &format!("GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        );
        assert!(r.starts_with("HTTP/1.1 403"), "{url}: {r}");
        assert!(!r.contains("trove_requests_total"), "{url}: {r}");
    }
    let metrics = request(
        admin,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(
        metrics.contains("trove_destinations_refused_total{reason=\"own-listener\"} 3"),
        "{metrics}"
    );
}

/// One request from the local address `from` (e.g. 127.0.0.2); the whole response.
fn request_from(from: &str, addr: &str, raw: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let mut s = socket.connect(addr.parse().unwrap()).await.unwrap();
        s.write_all(raw.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    })
}

/// The admin listener has its own ACL: `[admin] allow`, checked on accept.
#[test]
fn the_admin_listener_refuses_peers_outside_admin_allow() {
    let dir = TempDir::new("serve-admin-allow");
    let trove = Trove::start(
        dir.path(),
        "[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"forward\"\n[admin]\nlisten = \"127.0.0.1:0\"\nallow = [\"127.0.0.1/32\"]\n[log]\naccess = \"\"\n",
    );
    let get = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let refused = request_from("127.0.0.2", &trove.admin(), get);
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(!refused.contains("trove_requests_total"), "{refused}");
    let allowed = request_from("127.0.0.1", &trove.admin(), get);
    assert!(allowed.starts_with("HTTP/1.1 200"), "{allowed}");
    assert!(
        allowed.contains("trove_admin_connections_refused_total 1"),
        "{allowed}"
    );
}

/// `serve --check` finds what `serve` would die of, and every problem at once, each by its
/// key: the operator's report was a check that passed and a start that failed with only
/// "No such file or directory".
#[test]
fn check_reports_every_problem_by_key_including_the_log_path() {
    let dir = TempDir::new("serve-every-problem");
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[log]\naccess = \"/nonexistent/dir/access.log\"\n[timeouts]\nconnect = \"5\"\n\
         [cache]\nmemory = \"1G\"\n[[listener]]\nlisten = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    for args in [
        &["serve", "--check", "--config"][..],
        &["serve", "--config"][..],
    ] {
        let out = trove().args(args).arg(&path).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        for want in [
            "4 problems",
            "log.access",
            "/nonexistent/dir",
            "timeouts.connect",
            "needs a unit",
            "cache.memory",
            "1GiB",
            "listener[0].mode: required",
        ] {
            assert!(
                err.contains(want),
                "{args:?}: {want:?} missing from:\n{err}"
            );
        }
    }
}

/// Issue 20: `--check` passed a port another process holds, and the start-up error did not
/// say which key named it.
#[test]
fn check_and_start_name_the_listener_whose_port_is_in_use() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let dir = TempDir::new("serve-port-in-use");
    let path = dir.path().join("trove.toml");
    std::fs::write(
        &path,
        format!(
            "[[listener]]\nlisten = \"127.0.0.1:{port}\"\nmode = \"forward\"\n[admin]\nlisten = \"127.0.0.1:0\"\n"
        ),
    )
    .unwrap();
    for args in [
        &["serve", "--check", "--config"][..],
        &["serve", "--config"],
    ] {
        let out = trove().args(args).arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "listener[0].listen: cannot listen on 127.0.0.1:{port}"
            )),
            "{args:?}: {err}"
        );
    }
}

/// Issue 20: stderr carried colour codes into files and the journal.
#[test]
fn stderr_to_a_file_or_pipe_has_no_colour_codes() {
    let dir = TempDir::new("serve-no-colour");
    let mut cmd = trove();
    cmd.env("TROVE_LOG", "info");
    let path = dir.path().join("trove.toml");
    std::fs::write(
        &path,
        "[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"forward\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[origin_pool]\nidle_timeout = \"1s\"\n",
    )
    .unwrap();
    let mut child = cmd
        .args(["serve", "--config"])
        .arg(&path)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    while let Some(Ok(line)) = lines.next() {
        seen.push(line.clone());
        if let Some(proxy) = line.strip_prefix("listening forward ") {
            // A malformed request is logged at info.
            let _ = request(proxy, "BAD\r\n\r\n");
        }
        if line.contains("malformed") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.iter().any(|l| l.contains("INFO")), "{seen:?}");
    assert!(!seen.iter().any(|l| l.contains('\u{1b}')), "{seen:?}");
}

/// Issue 20: `trove stats` said `cannot connect: Connection refused` without where, and
/// the API commands took no `--config` to find the admin listener.
#[test]
fn api_commands_say_where_they_tried_and_take_the_config() {
    let dead = common::free_port();
    let out = trove().args(["stats", "--api", &dead]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("admin API at {dead}")), "{err}");

    let dir = TempDir::new("serve-api-config");
    let t = start(&dir, "");
    let admin = t.admin();
    // The config the API commands read says where the admin listener is; the token is
    // the one the running trove generated for that port.
    let cli = dir.path().join("cli.toml");
    std::fs::write(&cli, format!("[admin]\nlisten = \"{admin}\"\n")).unwrap();
    let out = trove()
        .args(["stats", "--config"])
        .arg(&cli)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"tiers\""));
}
