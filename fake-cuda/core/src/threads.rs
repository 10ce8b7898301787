//! Per-thread state that goes away with its thread.
//!
//! [`PerThread`] maps the calling thread to a value, like a `HashMap<ThreadId, T>`, but each
//! entry also holds a weak reference to a token that lives in the thread's thread-local
//! storage. When the thread exits, the token drops; entries of exited threads are swept
//! whenever the map has doubled since the last sweep, so the map stays proportional to the
//! threads alive (amortised O(1) per insertion) in programs that start and end many threads.

use fnv::FnvHashMap as HashMap;
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

thread_local! {
    /// Alive as long as the thread: entries keep a `Weak` to it.
    static ALIVE: Arc<()> = Arc::new(());
    /// The thread's id, read once (`thread::current` clones the thread's handle each time).
    static ID: ThreadId = std::thread::current().id();
}

/// The calling thread's id.
fn current_id() -> ThreadId {
    ID.try_with(|id| *id)
        .unwrap_or_else(|_| std::thread::current().id())
}

/// A value per thread, forgotten some time after the thread exits.
#[derive(Debug)]
pub struct PerThread<T> {
    entries: HashMap<ThreadId, (Weak<()>, T)>,
    /// Entry count after the last sweep.
    swept_len: usize,
}

impl<T> Default for PerThread<T> {
    fn default() -> Self {
        PerThread {
            entries: HashMap::default(),
            swept_len: 0,
        }
    }
}

impl<T> PerThread<T> {
    /// The calling thread's value.
    pub fn get(&self) -> Option<&T> {
        self.entries.get(&current_id()).map(|(_, v)| v)
    }

    /// The calling thread's value, created with `make` if missing. Values of exited threads
    /// that a sweep removed are handed to `gone`.
    pub fn get_or_insert_with(&mut self, make: impl FnOnce() -> T, gone: impl FnMut(T)) -> &mut T {
        let id = current_id();
        if !self.entries.contains_key(&id) {
            if self.entries.len() >= 2 * self.swept_len.max(8) {
                self.sweep(gone);
            }
            // A thread being torn down has no token any more: its entry is swept next time.
            let token = ALIVE
                .try_with(Arc::downgrade)
                .unwrap_or_else(|_| Weak::new());
            self.entries.insert(id, (token, make()));
        }
        &mut self.entries.get_mut(&id).expect("present").1
    }

    /// Removes the entries of exited threads, handing their values to `gone`.
    pub fn sweep(&mut self, mut gone: impl FnMut(T)) {
        let dead: Vec<ThreadId> = self
            .entries
            .iter()
            .filter(|(_, (token, _))| token.strong_count() == 0)
            .map(|(&id, _)| id)
            .collect();
        for id in dead {
            if let Some((_, v)) = self.entries.remove(&id) {
                gone(v);
            }
        }
        self.swept_len = self.entries.len();
    }

    /// Entries held (threads alive, plus exited ones not swept yet).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no thread has an entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All values.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.values().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_exited_threads_are_swept() {
        let mut m = PerThread::default();
        let mut gone = 0;
        *m.get_or_insert_with(|| 1, |_| gone += 1) += 1;
        assert_eq!(m.get(), Some(&2));
        let shared = std::sync::Mutex::new(m);
        for _ in 0..1000 {
            std::thread::scope(|s| {
                s.spawn(|| {
                    shared.lock().unwrap().get_or_insert_with(|| 7, |_| {});
                });
            });
        }
        let m = shared.into_inner().unwrap();
        assert!(m.len() <= 32, "{} entries for 1 live thread", m.len());
        assert_eq!(m.get(), Some(&2), "the live thread's entry stays");
    }
}
