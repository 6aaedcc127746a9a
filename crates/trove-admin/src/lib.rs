//! Admin listener.
