//! The config loader (`trove serve --check`, start-up): any text is refused with a message or
//! accepted as settings that validate; never a panic. The binary's own `config.rs` is compiled
//! in as it is, so this fuzzes exactly what `trove serve` runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/config.rs"]
mod config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = config::Config::parse(text) {
        assert!(c.proxy_settings().validate().is_ok());
        let _ = c.admin_addr();
    }
});
