//! Proxy.
