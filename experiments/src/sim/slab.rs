//! A slab: a `Vec` of slots with a free list, so that large payloads (messages) live in one
//! place while the event queue carries only their `u32` slot index.
//!
//! Slots are reused last-freed-first, which keeps the slab as small as the largest number of
//! payloads alive at once (messages in flight) and keeps reuse deterministic.

/// Payloads of type `T` addressed by `u32` keys.
pub struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { slots: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slab<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty slab with room for `n` values before it reallocates (a reservation: pages
    /// are only touched as slots are used). Growing by doubling instead copies every value
    /// at each step, which showed in the simulator's profile.
    pub fn with_capacity(n: usize) -> Self {
        Slab { slots: Vec::with_capacity(n), free: Vec::with_capacity(n) }
    }

    /// Store `value`; returns its key.
    #[inline]
    pub fn insert(&mut self, value: T) -> u32 {
        match self.free.pop() {
            Some(k) => {
                self.slots[k as usize] = Some(value);
                k
            }
            None => {
                self.slots.push(Some(value));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Remove and return the value under `key` (`None` if the slot is empty or unknown).
    #[inline]
    pub fn take(&mut self, key: u32) -> Option<T> {
        let v = self.slots.get_mut(key as usize)?.take();
        if v.is_some() {
            self.free.push(key);
        }
        v
    }

    /// A reference to the value under `key`.
    pub fn get(&self, key: u32) -> Option<&T> {
        self.slots.get(key as usize).and_then(|s| s.as_ref())
    }

    /// Number of stored values.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of slots ever allocated (the high-water mark).
    pub fn capacity_used(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_take_reuse() {
        let mut s = Slab::new();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!(s.len(), 2);
        assert_eq!(s.take(a), Some("a"));
        assert_eq!(s.take(a), None);
        let c = s.insert("c");
        assert_eq!(c, a, "freed slot is reused");
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.take(99), None);
        assert_eq!(s.capacity_used(), 2);
    }
}
