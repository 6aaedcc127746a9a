//! Child processes.
