//! Doubly linked lists threaded through one slab of nodes by index (no pointers, so no
//! `unsafe`): O(1) unlink and push at the newest end, slots of removed nodes reused. The
//! list-based eviction policies ([`crate::Lru`], [`crate::Sieve`], [`crate::WTinyLfu`]) keep
//! their lists here; one slab may hold several lists, each named by its [`Ends`].

/// No slot.
pub(crate) const NIL: u32 = u32::MAX;

/// The two ends of one list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ends {
    pub newest: u32,
    pub oldest: u32,
}

impl Default for Ends {
    fn default() -> Self {
        Ends {
            newest: NIL,
            oldest: NIL,
        }
    }
}

#[derive(Debug)]
struct Node<T> {
    value: T,
    /// Toward the newest end, or [`NIL`].
    newer: u32,
    /// Toward the oldest end, or [`NIL`].
    older: u32,
}

/// The nodes of one or more lists.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    nodes: Vec<Node<T>>,
    /// Slots of released nodes, reused before the slab grows.
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            nodes: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// A node holding `value`, in no list yet.
    pub fn alloc(&mut self, value: T) -> u32 {
        let node = Node {
            value,
            newer: NIL,
            older: NIL,
        };
        match self.free.pop() {
            Some(s) => {
                self.nodes[s as usize] = node;
                s
            }
            None => {
                // A slab of 2^32 - 1 nodes (64 GiB of them) is beyond any memory budget.
                let s = u32::try_from(self.nodes.len()).expect("fewer than 2^32 objects");
                self.nodes.push(node);
                s
            }
        }
    }

    /// Gives `slot` (already unlinked) back for reuse.
    pub fn release(&mut self, slot: u32) {
        self.free.push(slot);
    }

    pub fn get(&self, slot: u32) -> &T {
        &self.nodes[slot as usize].value
    }

    pub fn get_mut(&mut self, slot: u32) -> &mut T {
        &mut self.nodes[slot as usize].value
    }

    /// The next node toward the newest end, or [`NIL`].
    pub fn newer(&self, slot: u32) -> u32 {
        self.nodes[slot as usize].newer
    }

    /// Takes `slot` out of the list `ends`.
    pub fn unlink(&mut self, ends: &mut Ends, slot: u32) {
        let Node { newer, older, .. } = self.nodes[slot as usize];
        match newer {
            NIL => ends.newest = older,
            n => self.nodes[n as usize].older = older,
        }
        match older {
            NIL => ends.oldest = newer,
            o => self.nodes[o as usize].newer = newer,
        }
    }

    /// Puts `slot` (in no list) at the newest end of `ends`.
    pub fn push_newest(&mut self, ends: &mut Ends, slot: u32) {
        let old = ends.newest;
        {
            let n = &mut self.nodes[slot as usize];
            n.newer = NIL;
            n.older = old;
        }
        match old {
            NIL => ends.oldest = slot,
            o => self.nodes[o as usize].newer = slot,
        }
        ends.newest = slot;
    }
}
