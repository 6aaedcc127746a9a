//! Storage tiers.
