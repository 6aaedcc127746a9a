//! The files an operator installs from `contrib/`: the systemd unit and the service config
//! agree (every path trove writes is one the unit makes writable under
//! `ProtectSystem=strict`), the config passes `trove serve --check`, and systemd accepts
//! the unit (`systemd-analyze verify`, where systemd's tools are installed).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{trove, TempDir};

fn contrib(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../contrib")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The value of `key=` in the unit (the first line setting it).
fn unit_value(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(|v| v.trim().to_string())
}

/// The quoted paths the service config names, by key.
fn config_paths(config: &str) -> Vec<(String, String)> {
    config
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            let v = v
                .split('#')
                .next()?
                .trim()
                .strip_prefix('"')?
                .strip_suffix('"')?;
            v.starts_with('/')
                .then(|| (k.trim().to_string(), v.to_string()))
        })
        .collect()
}

/// Issue 20: the unit set `ProtectSystem=strict` with no writable place for the README's
/// `/var/cache/trove`, and `PrivateTmp=true` hid the generated token from operators.
#[test]
fn the_unit_makes_every_path_the_service_config_writes() {
    let unit = contrib("trove.service");
    let config = contrib("trove.toml");
    assert_eq!(
        unit_value(&unit, "ProtectSystem").as_deref(),
        Some("strict")
    );
    let made = [
        ("CacheDirectory", "/var/cache/"),
        ("LogsDirectory", "/var/log/"),
        ("RuntimeDirectory", "/run/"),
    ]
    .map(|(key, root)| {
        let dir = unit_value(&unit, key).unwrap_or_else(|| panic!("no {key}= in the unit"));
        format!("{root}{dir}/")
    });
    for (key, path) in config_paths(&config) {
        if key == "token_file" {
            // Read, not written: /etc/trove is the operator's.
            assert!(path.starts_with("/etc/trove/"), "{key} = {path}");
            continue;
        }
        let under = |d: &String| format!("{path}/").starts_with(d.as_str());
        assert!(
            made.iter().any(under),
            "{key} = {path:?} is not under a directory the unit makes ({made:?})"
        );
    }
    // The runtime directory is where trove looks ($XDG_RUNTIME_DIR/trove), private as it
    // requires, so the admin socket and a generated token are not in a private /tmp.
    assert_eq!(
        unit_value(&unit, "RuntimeDirectoryMode").as_deref(),
        Some("0700")
    );
    assert_eq!(
        unit_value(&unit, "Environment").as_deref(),
        Some("XDG_RUNTIME_DIR=%t")
    );
    let exec = unit_value(&unit, "ExecStart").unwrap();
    assert!(exec.ends_with("--config /etc/trove/trove.toml"), "{exec}");
}

/// The service config passes `trove serve --check`, its paths moved into a scratch
/// directory (and its ports to free ones) as if the unit had made them.
#[test]
fn the_service_config_passes_check() {
    let dir = TempDir::new("contrib-check");
    for sub in ["cache", "log", "run", "etc"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("etc/api-token"), "0123456789abcdef\n").unwrap();
    let config = contrib("trove.toml")
        .replace("/var/cache/trove", &dir.join("cache").display().to_string())
        .replace("/var/log/trove", &dir.join("log").display().to_string())
        .replace("/run/trove", &dir.join("run").display().to_string())
        .replace("/etc/trove", &dir.join("etc").display().to_string())
        .replace("listen = \"3128\"", "listen = \"127.0.0.1:0\"")
        .replace("127.0.0.1:9090", "127.0.0.1:0");
    let path = dir.join("trove.toml");
    std::fs::write(&path, config).unwrap();
    let out = trove()
        .args(["serve", "--check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// systemd's own check of the unit, with `ExecStart` pointing at the binary under test.
/// Skipped (and said so) where systemd's tools are not installed.
#[test]
fn systemd_accepts_the_unit() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze is not installed: the unit is not verified here");
        return;
    }
    let dir = TempDir::new("contrib-unit");
    let unit =
        contrib("trove.service").replace("/usr/local/bin/trove", env!("CARGO_BIN_EXE_trove"));
    let path = dir.join("trove.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Warnings about the unit itself (unknown keys, bad values) name its file.
    assert!(!err.lines().any(|l| l.contains("trove.service:")), "{err}");
}
