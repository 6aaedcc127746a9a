//! `trove bench` through `trove serve`: with a cache large enough, the document hit ratio the
//! robots measure is within 2 points of the offered one, and no body is wrong.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Parser;
use trove_bench::{BenchArgs, Command as BenchCommand};

#[derive(Parser)]
struct Top {
    #[command(flatten)]
    bench: BenchArgs,
}

/// Stops the proxy by its PID however the test ends.
struct Proxy(std::process::Child);
impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn polymix2_through_trove_hits_what_is_offered() {
    let dir = std::env::temp_dir().join(format!("trove-bench-through-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("trove.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\nlisten = \"127.0.0.1:0\"\nmode = \"forward\"\n[cache]\nmemory = \"512MiB\"\n\
             [admin]\nlisten = \"\"\n[log]\naccess = \"{}\"\n",
            dir.join("access.log").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_trove"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let proxy = Proxy(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening forward ") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("trove printed its forward listener");
    let argv = format!(
        "bench run --workload polymix-2 --scale 0.0005 --rate 800 --think 0 --robots 20 \
         --max-requests 6000 --quiet --proxy {addr} --label trove"
    );
    let BenchCommand::Run(run) = Top::try_parse_from(argv.split_whitespace())
        .unwrap()
        .bench
        .command
    else {
        panic!("not a run")
    };
    let r = trove_bench::cli_execute(&run).unwrap();
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
    let t = &r.total;
    assert_eq!(t.errors, 0, "{:?}", t.errors_by_kind);
    assert_eq!(t.uncachable_hits, 0, "trove must not hit private responses");
    let (dhr, offered) = (t.dhr.unwrap(), t.offered_dhr.unwrap());
    assert!(
        (dhr - offered).abs() < 0.02,
        "measured {dhr}, offered {offered}"
    );
}
