//! trove's TOML config file. Every section is optional and every key has a safe default;
//! unknown keys and bad values are refused at start-up with a message naming the key.

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;
use trove_proxy::settings::{
    AccessSettings, CacheSettings, ConnectSettings, LimitSettings, ListenerSettings, LogSettings,
    OriginRoute, PoolSettings, ResolverSettings, TimeoutSettings,
};
use trove_proxy::Settings;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSettings {
    /// Where `/metrics` and the status page are served; `""` turns the listener off.
    pub listen: String,
    /// Client networks allowed to use the admin listener (others get a 403). Default:
    /// loopback only.
    pub allow: Vec<ipnet::IpNet>,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            listen: "127.0.0.1:9090".into(),
            allow: vec![
                "127.0.0.0/8".parse().expect("static"),
                "::1/128".parse().expect("static"),
            ],
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSettings {
    /// Worker threads; 0 means one per core.
    pub threads: usize,
}

/// The whole file.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub listener: Vec<ListenerSettings>,
    pub access: AccessSettings,
    pub cache: CacheSettings,
    pub limits: LimitSettings,
    pub timeouts: TimeoutSettings,
    pub origin_pool: PoolSettings,
    pub connect: ConnectSettings,
    pub resolver: ResolverSettings,
    pub origin: Vec<OriginRoute>,
    pub log: LogSettings,
    pub admin: AdminSettings,
    pub runtime: RuntimeSettings,
}

impl Config {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))?;
        Config::parse(&text).map_err(|e| anyhow::anyhow!("config {}: {e}", path.display()))
    }

    /// Parses and checks config text.
    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let config: Config = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        config
            .proxy_settings()
            .validate()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        config.admin_addr()?;
        Ok(config)
    }

    /// The admin listener address, if enabled.
    pub fn admin_addr(&self) -> anyhow::Result<Option<SocketAddr>> {
        if self.admin.listen.is_empty() {
            return Ok(None);
        }
        self.admin
            .listen
            .parse()
            .map(Some)
            .map_err(|_| anyhow::anyhow!("admin.listen: invalid address {:?}", self.admin.listen))
    }

    /// The proxy's part of the config. No listener configured means the default forward
    /// proxy on 127.0.0.1:3128.
    pub fn proxy_settings(&self) -> Settings {
        let defaults = Settings::default();
        Settings {
            listeners: if self.listener.is_empty() {
                defaults.listeners
            } else {
                self.listener.clone()
            },
            access: self.access.clone(),
            cache: self.cache.clone(),
            limits: self.limits.clone(),
            timeouts: self.timeouts.clone(),
            origin_pool: self.origin_pool.clone(),
            connect: self.connect.clone(),
            resolver: self.resolver.clone(),
            origins: self.origin.clone(),
            log: self.log.clone(),
            other_listeners: Vec::new(),
        }
    }
}

/// A commented example config, printed by `trove serve --print-config`.
pub const EXAMPLE: &str = include_str!("../../../trove.example.toml");

#[cfg(test)]
mod tests {
    use super::*;
    use trove_proxy::Mode;

    #[test]
    fn empty_file_gives_the_defaults() {
        let c = Config::parse("").unwrap();
        let s = c.proxy_settings();
        assert_eq!(s.listeners[0].addr.to_string(), "127.0.0.1:3128");
        assert_eq!(s.listeners[0].mode, Mode::Forward);
        assert_eq!(s.cache.memory, 256 << 20);
        assert_eq!(
            c.admin_addr().unwrap().unwrap().to_string(),
            "127.0.0.1:9090"
        );
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e = Config::parse("[cache]\nmemroy = \"1GiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("memroy"), "{e}");
        let e = Config::parse("colour = 1\n").unwrap_err().to_string();
        assert!(e.contains("colour"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let e = Config::parse("[cache]\nmemory = \"lots\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("memory"), "{e}");
        let e = Config::parse("[[listener]]\naddr = \"127.0.0.1:1\"\nmode = \"sideways\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sideways") || e.contains("mode"), "{e}");
        let e = Config::parse("[[listener]]\naddr = \"127.0.0.1:1\"\nmode = \"reverse\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("origin"), "{e}");
        let e = Config::parse("[[origin]]\nhost = \"*\"\nupstreams = [\"https://x\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("upstreams"), "{e}");
    }

    #[test]
    fn zero_durations_are_refused_by_name() {
        let e = Config::parse("[origin_pool]\nidle_timeout = \"0s\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("origin_pool.idle_timeout"), "{e}");
        let e = Config::parse("[origin_pool]\nidle_timeout = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("origin_pool.idle_timeout"), "{e}");
        let e = Config::parse("[timeouts]\nclient_idle = \"0ms\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("timeouts.client_idle"), "{e}");
        Config::parse("[cache]\nheuristic_max = \"0s\"\n").unwrap();
    }

    /// Newer size and duration keys need their unit, and refuse zero, naming the key.
    #[test]
    fn stream_buffer_needs_a_unit_and_room_for_the_read_ahead() {
        let e = Config::parse("[cache]\nstream_buffer = 1048576\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stream_buffer") && e.contains("unit"), "{e}");
        let e = Config::parse("[cache]\nstream_buffer = \"1048576\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stream_buffer") && e.contains("unit"), "{e}");
        let e = Config::parse("[cache]\nstream_buffer = \"0MiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cache.stream_buffer") && e.contains("greater than 0"),
            "{e}"
        );
        let e = Config::parse("[cache]\nstream_buffer = \"32KiB\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cache.stream_buffer") && e.contains("read_ahead"),
            "{e}"
        );
        let c = Config::parse("[cache]\nstream_buffer = \"4MiB\"\n").unwrap();
        assert_eq!(c.proxy_settings().cache.stream_buffer, 4 << 20);
    }

    /// The request-body limits: units required, zero refused, by name.
    #[test]
    fn request_body_limits_need_units_and_refuse_zero() {
        for (text, key, why) in [
            ("[timeouts]\nclient_body = 30\n", "client_body", "unit"),
            ("[timeouts]\nclient_body = \"30\"\n", "client_body", "unit"),
            (
                "[timeouts]\nclient_body = \"0s\"\n",
                "timeouts.client_body",
                "greater than 0",
            ),
            (
                "[limits]\nclient_body_min_rate = 1024\n",
                "client_body_min_rate",
                "unit",
            ),
            (
                "[limits]\nclient_body_min_rate = \"0KiB/s\"\n",
                "limits.client_body_min_rate",
                "greater than 0",
            ),
            (
                "[limits]\nclient_body_buffer = 65536\n",
                "client_body_buffer",
                "unit",
            ),
            (
                "[limits]\nclient_body_buffer = \"0B\"\n",
                "limits.client_body_buffer",
                "greater than 0",
            ),
            (
                "[origin_pool]\nmax_uploads_per_origin = 0\n",
                "origin_pool.max_uploads_per_origin",
                "between",
            ),
            (
                "[origin_pool]\nmax_per_origin = 8\nmax_uploads_per_origin = 9\n",
                "origin_pool.max_uploads_per_origin",
                "between",
            ),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(why), "{text}: {e}");
        }
        let c = Config::parse(
            "[timeouts]\nclient_body = \"10s\"\n[limits]\nclient_body_min_rate = \"2KiB/s\"\n\
             client_body_buffer = \"16KiB\"\n[origin_pool]\nmax_per_origin = 8\n",
        )
        .unwrap();
        let s = c.proxy_settings();
        assert_eq!(s.timeouts.client_body, std::time::Duration::from_secs(10));
        assert_eq!(s.limits.client_body_min_rate, 2048);
        assert_eq!(s.limits.client_body_buffer, 16 << 10);
        assert_eq!(
            s.origin_pool.uploads_per_origin(),
            2,
            "a quarter by default"
        );
    }

    #[test]
    fn destination_and_admin_acl_settings_are_checked_by_name() {
        let c = Config::parse(
            "[access]\nlocal_clients = []\nallow_destinations = [\"127.0.0.1:8080\", \"[fd00::/8]:443\"]\ndeny_private_destinations = true\n[admin]\nallow = [\"10.0.0.0/24\"]\n",
        )
        .unwrap();
        let s = c.proxy_settings();
        assert!(s.access.local_clients.is_empty());
        assert!(s.access.deny_private_destinations);
        assert_eq!(
            c.admin.allow,
            vec!["10.0.0.0/24".parse::<ipnet::IpNet>().unwrap()]
        );
        let e = Config::parse("[access]\nallow_destinations = [\"nope\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("access.allow_destinations"), "{e}");
        let e = Config::parse("[admin]\nallow = [\"everyone\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("allow") || e.contains("everyone"), "{e}");
        let d = Config::parse("").unwrap();
        assert_eq!(d.admin.allow.len(), 2, "loopback by default");
        assert_eq!(d.proxy_settings().access.local_clients.len(), 2);
    }

    #[test]
    fn resolver_settings_need_units_and_are_checked_by_name() {
        let c = Config::parse(
            "[resolver]\nmax_ttl = \"10m\"\nmin_ttl = \"0s\"\nnegative_ttl = \"250ms\"\nmax_names = 5\n",
        )
        .unwrap();
        let r = c.proxy_settings().resolver;
        assert_eq!(r.max_ttl, std::time::Duration::from_secs(600));
        assert_eq!(r.min_ttl, std::time::Duration::ZERO);
        assert_eq!(r.negative_ttl, std::time::Duration::from_millis(250));
        assert_eq!(r.max_names, 5);
        for bad in [
            "max_ttl = 60",
            "max_ttl = \"60\"",
            "negative_ttl = \"1.5\"",
            "min_ttl = \"5 parsecs\"",
        ] {
            let e = Config::parse(&format!("[resolver]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("unit"), "{bad}: {e}");
            assert!(e.contains(bad.split(' ').next().unwrap()), "{bad}: {e}");
        }
        for (bad, key) in [
            ("max_ttl = \"0s\"", "resolver.max_ttl"),
            ("max_names = 0", "resolver.max_names"),
            ("min_ttl = \"2h\"", "resolver.min_ttl"),
        ] {
            let e = Config::parse(&format!("[resolver]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    /// `[cache.disk]`: one path or a list, units required, bounds checked by name.
    #[test]
    fn disk_settings_are_checked_by_name() {
        let c = Config::parse("[cache.disk]\npath = \"/tmp/a\"\nsize = \"1GiB\"\n").unwrap();
        let d = c.proxy_settings().cache.disk.unwrap();
        assert_eq!(d.path, vec![std::path::PathBuf::from("/tmp/a")]);
        assert_eq!(d.size, 1 << 30);
        assert_eq!(d.sync_interval, std::time::Duration::from_secs(1));
        assert_eq!(d.region_size, 16 << 20);
        assert_eq!(d.reclaim.as_str(), "fifo-reinsert");
        let c = Config::parse(
            "[cache.disk]\npath = [\"/a\", \"/b\"]\nsize = \"1GiB\"\nsync_interval = \"250ms\"\nreclaim = \"fifo\"\n",
        )
        .unwrap();
        let d = c.proxy_settings().cache.disk.unwrap();
        assert_eq!(d.path.len(), 2);
        assert_eq!(d.reclaim.as_str(), "fifo");
        assert!(Config::parse("")
            .unwrap()
            .proxy_settings()
            .cache
            .disk
            .is_none());
        for (text, key) in [
            ("path = \"/a\"\nsize = 1000000000", "unit"),
            ("path = \"/a\"\nsize = \"1MiB\"", "cache.disk.size"),
            ("path = []\nsize = \"1GiB\"", "cache.disk.path"),
            (
                "path = \"/a\"\nsize = \"1GiB\"\nregion_size = \"1KiB\"",
                "cache.disk.region_size",
            ),
            (
                "path = \"/a\"\nsize = \"1GiB\"\nsync_interval = \"0s\"",
                "cache.disk.sync_interval",
            ),
            (
                "path = \"/a\"\nsize = \"1GiB\"\nreclaim = \"lru\"",
                "reclaim",
            ),
            ("size = \"1GiB\"", "path"),
        ] {
            let e = Config::parse(&format!("[cache.disk]\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn the_example_config_is_valid() {
        Config::parse(EXAMPLE).unwrap();
    }
}
