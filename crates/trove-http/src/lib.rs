//! HTTP caching rules (RFC 9111). Pure: no I/O, no clock.
