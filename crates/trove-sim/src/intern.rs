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
    /// The name asked for last and its id: traces name one client (`-`) or the same one
    /// many times in a row, which then costs a comparison, not a hash.
    last: String,
    last_id: Option<u32>,
}

impl Names {
    pub fn id(&mut self, s: &str) -> u32 {
        if let Some(id) = self.last_id {
            if self.last == s {
                return id;
            }
        }
        let id = match self.ids.get(s) {
            Some(&id) => id,
            None => {
                let id = self.ids.len() as u32;
                self.ids.insert(s.into(), id);
                id
            }
        };
        // Reused: no allocation once it has held the longest name.
        self.last.clear();
        self.last.push_str(s);
        self.last_id = Some(id);
        id
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}
