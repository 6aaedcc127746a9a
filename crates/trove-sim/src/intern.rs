//! Interning: each distinct URL (and client, and server) is worked on once — parsed,
//! normalised into trove's cache key, classified — and later records find it by one hash
//! lookup of the raw text. foldhash is the workspace's fast in-memory hash (see
//! `trove_store::hash`).

/// A fixed seed: a replay is the same every time it runs.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// A set under the same hash as [`FastMap`].
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::FixedState>;

/// Strings to dense ids.
#[derive(Debug, Default)]
pub struct Names {
    ids: FastMap<Box<str>, u32>,
}

impl Names {
    pub fn id(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.ids.len() as u32;
        self.ids.insert(s.into(), id);
        id
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}
