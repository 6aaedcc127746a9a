//! trove's caching proxy: listeners, client connections, the request state machine, the
//! origin connection pool, the access log and the metrics.
//!
//! A request's path through the code, by module: [`listener`] accepts and checks the ACL,
//! [`client::conn`] reads a head ([`client::head`]) and its body ([`client::body`]),
//! [`cache`] runs the state machine (resolve → lookup → hit / revalidate / miss / pass →
//! deliver), [`origin`] talks to origin servers over pooled connections, [`client::respond`]
//! writes the reply, and [`access_log`] and [`metrics`] record the [`outcome::Outcome`].
//! [`destination`] guards every connection whose destination a client chose (forward
//! requests, CONNECT tunnels) against server-side request forgery; [`resolver`] turns names
//! into addresses for every connection, with a cache.
//!
//! Dependencies: tokio (the runtime), hyper (the origin-side HTTP/1.1 client), httparse
//! (request-head parsing, the parser hyper itself uses), h2 (HTTP/2 to clients, hyper's own
//! HTTP/2 crate, used directly: see `client::h2`; the workspace builds it with a patch that
//! gives an idle connection's buffers back, `vendor/README.md`), ipnet (ACL networks),
//! hickory-resolver (DNS, under [`resolver`]'s cache), socket2 (the listening socket's
//! backlog), rustix (`poll` for the acceptor threads and the open files limit, without
//! `unsafe`), serde_json (the replayable trace's lines, [`trace`]), and trove's own rules
//! (`trove-http`) and store (`trove-store`). The store is held only as the storage
//! interface (`trove_store::Storage`): the tiers under memory (the disk) are opened by the
//! binary and handed in ([`start_with`], [`OpenLower`]), so this crate does not depend on
//! them.

pub mod access_log;
pub mod acl;
pub mod cache;
pub mod client;
pub mod destination;
pub mod fd_limit;
pub mod feed;
pub mod handshake;
pub mod lifecycle;
pub mod listener;
pub mod manage;
pub mod metrics;
pub mod named_cache;
pub mod origin;
pub mod reply;
pub mod resolver;
pub mod route;
pub mod settings;
pub mod state;
pub mod status;
pub mod trace;
pub mod tunnel;
pub mod upgrade;
pub mod upstream;

pub use listener::{start, start_with, Running};
pub use settings::{Mode, Settings};
pub use state::{LowerError, OpenLower, Shared};
