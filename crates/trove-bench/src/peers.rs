//! Peer proxies.
