//! Issue 9's persistence in a real `trove serve` child process: invalidations by URL, tag,
//! named cache, prefix and ban acknowledged by the admin API, then `kill -9` and a restart —
//! none of the invalidated objects is served again, the others still are, from disk; a
//! cache directory of the previous format is discarded and one of a newer format refused;
//! the admin API's token, socket and put limit follow a reload, and with no token
//! configured one is generated where `trove` subcommands find it.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    api, get_text as get, is_hit, metric, origin_with, target_of, trove, wait_for, TempDir, Trove,
};

/// An origin serving every path with a cacheable body naming the path and how many
/// requests it had answered (so a refetch is told from a stored copy); `/t/red…` is tagged
/// `red`, `/t/blue…` `blue`.
fn origin() -> (String, Arc<AtomicUsize>) {
    let answered = Arc::new(AtomicUsize::new(0));
    origin_with(move |head| {
        let n = answered.fetch_add(1, Ordering::SeqCst);
        let target = target_of(head);
        let path = target
            .split_once("://")
            .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
            .unwrap_or(target);
        let mut body = format!("{path} answer #{n}");
        if path.contains("big") {
            // Past `sendfile_min` (64 KiB): read back from disk by sendfile.
            body.push_str(&".".repeat(100_000));
        }
        let tag = if path.starts_with("/t/red") {
            "surrogate-key: red\r\n"
        } else if path.starts_with("/t/blue") {
            "surrogate-key: blue\r\n"
        } else {
            ""
        };
        format!(
            "HTTP/1.1 200 OK\r\ncache-control: max-age=3600\r\n{tag}content-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    })
}

fn disk_config(disk: &Path, token: &str) -> String {
    format!(
        "[[listener]]\naddr = \"127.0.0.1:0\"\nmode = \"forward\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"{token}\"\n\
         [cache]\nmemory = \"1MiB\"\nmax_object = \"256KiB\"\n\
         [cache.disk]\npath = \"{}\"\nsize = \"4MiB\"\nregion_size = \"256KiB\"\n\
         [[named_cache]]\nname = \"cat\"\nhost = \"*\"\npath_prefix = \"/c/\"\n",
        disk.display()
    )
}

/// Issue 9: "once the API acknowledges an invalidation, no client gets an old copy — in
/// memory or on disk … after a crash and restart". Objects are invalidated by each kind of
/// rule (a tag's covering a large one, which a disk hit sends by `sendfile`), and
/// acknowledged; trove is killed at once (SIGKILL) and restarted on the same directory:
/// each invalidated object is fetched anew, and the objects next to them, which no rule
/// covers, are still hits from disk with the same bytes.
#[test]
fn acknowledged_invalidations_survive_kill_9() {
    let dir = TempDir::new("persist-kill9");
    let disk = dir.join("cache");
    let (origin, count) = origin();
    let config = disk_config(&disk, "s3cret");
    let url = |p: &str| format!("http://{origin}{p}");
    // (path, invalidated): one invalidated and one kept for each kind of rule.
    let objects = [
        ("/u/gone", true),
        ("/u/kept", false),
        ("/t/red-1", true),
        ("/t/blue-1", false),
        ("/t/red-big", true),
        ("/t/blue-big", false),
        ("/c/gone", true),
        ("/d/kept", false),
        ("/p/a/gone", true),
        ("/p/b/kept", false),
        ("/b/gone.css", true),
        ("/b/kept.js", false),
    ];
    let mut t = Trove::start(&dir, &config);
    let (proxy, admin) = (t.proxy(), t.admin());
    let mut first = Vec::new();
    for (p, _) in &objects {
        let (head, body) = get(&proxy, &url(p));
        assert!(head.starts_with("HTTP/1.1 200"), "{p}: {head}");
        first.push(body);
    }
    for (p, _) in &objects {
        assert!(is_hit(&get(&proxy, &url(p)).0), "{p} is stored");
    }
    assert!(
        wait_for(Duration::from_secs(20), || metric(
            &admin,
            "trove_disk_objects"
        ) >= objects.len() as f64),
        "every object reached the disk"
    );
    let calls = [
        format!(r#"{{"url": "{}"}}"#, url("/u/gone")),
        r#"{"tag": "red"}"#.to_string(),
        r#"{"cache": "cat"}"#.to_string(),
        format!(r#"{{"prefix": "{}"}}"#, url("/p/a/")),
        r#"{"ban": {"subject": "url", "op": "~", "value": "\\.css$"}}"#.to_string(),
    ];
    for c in &calls {
        let (status, body) = api(&admin, Some("s3cret"), "POST", "/v1/invalidate", c);
        assert_eq!(status, 200, "{c}: {body}");
    }
    // Acknowledged: crash now.
    t.kill9();
    let fetched = count.load(Ordering::SeqCst);
    let t = Trove::start(&dir, &config);
    let (proxy, admin) = (t.proxy(), t.admin());
    assert!(
        wait_for(Duration::from_secs(20), || metric(
            &admin,
            "trove_disk_ready"
        ) == 1.0),
        "the disk index came back"
    );
    for (i, (p, invalidated)) in objects.iter().enumerate() {
        let (head, body) = get(&proxy, &url(p));
        assert!(head.starts_with("HTTP/1.1 200"), "{p}: {head}");
        if *invalidated {
            assert!(
                !is_hit(&head),
                "{p} was invalidated before the crash: {head}"
            );
            assert_ne!(body, first[i], "{p}: the old copy came back");
        } else {
            assert!(is_hit(&head), "{p} is still stored: {head}");
            assert_eq!(body, first[i], "{p}");
        }
    }
    assert_eq!(
        count.load(Ordering::SeqCst) - fetched,
        6,
        "exactly the six invalidated objects were fetched again"
    );
}

/// Issue 8: "a cache directory of a newer format version is refused with a message, not
/// misread; an older one is read or cleanly discarded". The fixture is a directory written
/// by trove's disk format version 1 (records without labels), holding one object; this
/// trove discards it (says so) and serves nothing from it. A directory marked with a newer
/// version makes trove refuse to start, naming both versions.
#[test]
fn an_older_cache_directory_is_discarded_and_a_newer_one_refused() {
    let dir = TempDir::new("persist-formats");
    let disk = dir.join("cache");
    std::fs::create_dir_all(&disk).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/disk-v1");
    for f in ["FORMAT", "regions.dat"] {
        std::fs::copy(fixture.join(f), disk.join(f)).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(disk.join("FORMAT")).unwrap().trim(),
        "trove-disk 1"
    );
    let config = disk_config(&disk, "s3cret")
        .replace("region_size = \"256KiB\"", "region_size = \"64KiB\"")
        .replace("size = \"4MiB\"", "size = \"192KiB\"");
    let t = Trove::start(&dir, &config);
    assert!(
        wait_for(Duration::from_secs(10), || t.lines().iter().any(
            |l| l.contains("older or unmarked cache directory was discarded")
        )),
        "trove says it discarded the old directory: {:?}",
        t.lines()
    );
    // The fixture's object; its host resolves nowhere, so only the disk could answer.
    let (head, _) = get(&t.proxy(), "http://fixture.invalid/v1-object");
    assert!(
        !is_hit(&head),
        "an object of the old format was served: {head}"
    );
    assert_eq!(
        std::fs::read_to_string(disk.join("FORMAT")).unwrap().trim(),
        "trove-disk 2"
    );
    drop(t);
    std::fs::write(disk.join("FORMAT"), "trove-disk 3\n").unwrap();
    let e = match Trove::try_start(&dir, &config) {
        Ok(_) => panic!("a newer format was not refused"),
        Err(e) => e,
    };
    assert!(
        e.contains("disk format version 3, newer than this trove's 2"),
        "{e}"
    );
}

/// Issue 9: the API on 127.0.0.1 and a Unix socket by default, every call needing a bearer
/// token; with none configured, a random one is written (mode 0600) where `trove`
/// subcommands read it. `[admin] token`, `socket` and `max_put_body` follow a reload.
#[test]
fn the_admin_token_socket_and_put_limit_are_reloaded_and_a_token_is_made_when_none_is_set() {
    let dir = TempDir::new("persist-token");
    let base = "[[listener]]\naddr = \"127.0.0.1:0\"\nmode = \"forward\"\n[admin]\nlisten = \"127.0.0.1:0\"\n";
    let sock1 = dir.join("one.sock");
    let sock2 = dir.join("two.sock");
    let mut t = Trove::start(
        &dir,
        &format!("{base}token = \"one\"\nsocket = \"{}\"\n", sock1.display()),
    );
    let admin = t.admin();
    assert_eq!(api(&admin, Some("one"), "GET", "/v1/stats", "").0, 200);
    assert_eq!(api(&admin, Some("two"), "GET", "/v1/stats", "").0, 401);
    assert!(sock1.exists());
    std::fs::write(
        &t.config,
        format!(
            "{base}token = \"two\"\nsocket = \"{}\"\nmax_put_body = \"8B\"\n",
            sock2.display()
        ),
    )
    .unwrap();
    let out = trove()
        .args(["reload", "--pid", &t.child.id().to_string()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        wait_for(Duration::from_secs(10), || t
            .lines()
            .iter()
            .any(|l| l.contains("trove: reloaded"))),
        "{:?}",
        t.lines()
    );
    assert_eq!(api(&admin, Some("two"), "GET", "/v1/stats", "").0, 200);
    assert_eq!(api(&admin, Some("one"), "GET", "/v1/stats", "").0, 401);
    let (status, body) = api(
        &admin,
        Some("two"),
        "PUT",
        "/v1/object?url=http://example.com/big",
        "more than eight bytes",
    );
    assert_eq!(status, 413, "{body}");
    assert!(sock2.exists() && !sock1.exists(), "the socket moved");
    let out = trove()
        .args(["stats", "--api"])
        .arg(format!("unix:{}", sock2.display()))
        .args(["--token", "two"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    t.kill9();

    // No token configured, the socket by default: a token is made and found.
    let t = Trove::start(&dir, base);
    let admin = t.admin();
    assert!(
        wait_for(Duration::from_secs(10), || t
            .line("admin token in ")
            .is_some()),
        "{:?}",
        t.lines()
    );
    let files: Vec<String> = t
        .lines()
        .iter()
        .filter_map(|l| l.strip_prefix("admin token in ").map(str::to_string))
        .collect();
    assert_eq!(
        files.len(),
        2,
        "for the TCP port and beside the socket: {files:?}"
    );
    let token = std::fs::read_to_string(&files[0])
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(token.len(), 64);
    use std::os::unix::fs::PermissionsExt;
    for f in &files {
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }
    let socket = t
        .lines()
        .iter()
        .find_map(|l| l.strip_prefix("admin socket ").map(str::to_string))
        .expect("a socket by default");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{socket}");
    assert_eq!(api(&admin, None, "GET", "/v1/stats", "").0, 401);
    assert_eq!(api(&admin, Some(&token), "GET", "/v1/stats", "").0, 200);
    for endpoint in [admin.clone(), format!("unix:{socket}")] {
        let out = trove()
            .args(["purge", "--api", &endpoint, "--url", "http://example.com/x"])
            .env_remove("TROVE_TOKEN")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "trove purge --api {endpoint}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_file(&socket);
    for f in &files {
        let _ = std::fs::remove_file(f);
    }
}
