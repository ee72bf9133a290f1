//! [`ChunkCache`]: a shard's bounded memory of chunk bytes it read from a
//! filer that keeps nothing local (S3), so readers that go back over the
//! same stretch (a consumer group catching up, several consumers behind
//! the same producer, the index read before every fetch) cost one ranged
//! GET per block, not one per fetch.
//!
//! Chunks are cached in blocks of [`CHUNK_CACHE_BLOCK_BYTES`] aligned to
//! the object's start; the last block of an object is short. Blocks are
//! evicted least recently used first once the cache holds more than its
//! limit. Chunks are never overwritten (they are created, never put), so
//! a cached block stays true until its topic is deleted: the shard forgets
//! a topic's blocks then ([`ChunkCache::forget`]), as a deleted topic's
//! name (and so its chunk paths) may be taken again.
//!
//! A pure structure: the shard reads the blocks and hands them in.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use filer::ObjectPath;

/// The unit of caching: large enough that a sequential reader's next fetch
/// is mostly in the block its last one read, small enough that a reader
/// who wants a few records does not read a whole chunk.
pub(crate) const CHUNK_CACHE_BLOCK_BYTES: u64 = 1 << 20;

/// Bytes of one cached block.
pub(crate) type Block = Rc<Vec<u8>>;

#[derive(Debug)]
struct Cached {
    bytes: Block,
    /// The tick of its last use: its key in `ChunkCache::by_use`.
    used: u64,
}

#[derive(Debug)]
pub(crate) struct ChunkCache {
    /// Bytes the blocks may hold together; 0 caches nothing.
    limit: u64,
    bytes: u64,
    tick: u64,
    chunks: HashMap<ObjectPath, BTreeMap<u64, Cached>>,
    /// Every block by its last use, oldest first.
    by_use: BTreeMap<u64, (ObjectPath, u64)>,
}

impl ChunkCache {
    pub(crate) fn new(limit: u64) -> ChunkCache {
        ChunkCache {
            limit,
            bytes: 0,
            tick: 0,
            chunks: HashMap::new(),
            by_use: BTreeMap::new(),
        }
    }

    /// Whether anything is cached at all (a limit above 0).
    pub(crate) fn is_enabled(&self) -> bool {
        self.limit > 0
    }

    /// The bytes the cache holds.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Block `block` of `path` if cached, marked as just used.
    pub(crate) fn get(&mut self, path: &ObjectPath, block: u64) -> Option<Block> {
        self.tick += 1;
        let tick = self.tick;
        let cached = self.chunks.get_mut(path).and_then(|c| c.get_mut(&block))?;
        let key = self.by_use.remove(&cached.used);
        cached.used = tick;
        if let Some(key) = key {
            self.by_use.insert(tick, key);
        }
        Some(cached.bytes.clone())
    }

    /// Keep `bytes` as block `block` of `path`, evicting the least
    /// recently used blocks to stay within the limit. A block larger than
    /// the whole limit is not kept.
    pub(crate) fn insert(&mut self, path: &ObjectPath, block: u64, bytes: Block) {
        let len = bytes.len() as u64;
        if len > self.limit {
            return;
        }
        self.remove(path, block);
        while self.bytes + len > self.limit {
            let Some((_, (old_path, old_block))) = self.by_use.pop_first() else {
                break;
            };
            self.remove(&old_path, old_block);
        }
        self.tick += 1;
        self.chunks.entry(path.clone()).or_default().insert(
            block,
            Cached {
                bytes,
                used: self.tick,
            },
        );
        self.by_use.insert(self.tick, (path.clone(), block));
        self.bytes += len;
    }

    /// Forget every block of the objects at `prefix` and under `prefix/`.
    pub(crate) fn forget(&mut self, prefix: &ObjectPath) {
        let below = format!("{prefix}/");
        let gone: Vec<ObjectPath> = self
            .chunks
            .keys()
            .filter(|p| *p == prefix || p.as_str().starts_with(&below))
            .cloned()
            .collect();
        for path in gone {
            if let Some(blocks) = self.chunks.remove(&path) {
                for cached in blocks.values() {
                    self.by_use.remove(&cached.used);
                    self.bytes -= cached.bytes.len() as u64;
                }
            }
        }
    }

    fn remove(&mut self, path: &ObjectPath, block: u64) {
        let Some(blocks) = self.chunks.get_mut(path) else {
            return;
        };
        if let Some(cached) = blocks.remove(&block) {
            self.by_use.remove(&cached.used);
            self.bytes -= cached.bytes.len() as u64;
        }
        if blocks.is_empty() {
            self.chunks.remove(path);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn path(s: &str) -> ObjectPath {
        ObjectPath::new(s).unwrap()
    }

    fn block(len: usize, fill: u8) -> Block {
        Rc::new(vec![fill; len])
    }

    #[test]
    fn a_block_read_once_is_served_from_memory_after() {
        let mut cache = ChunkCache::new(10);
        let chunk = path("topics/a/b/0/0.chunk");
        assert!(cache.get(&chunk, 0).is_none());
        cache.insert(&chunk, 0, block(4, 7));
        assert_eq!(*cache.get(&chunk, 0).unwrap(), vec![7; 4]);
        assert!(cache.get(&chunk, 1).is_none());
    }

    #[test]
    fn the_least_recently_used_blocks_go_first_and_the_limit_holds() {
        let mut cache = ChunkCache::new(10);
        let (a, b) = (path("t/a"), path("t/b"));
        cache.insert(&a, 0, block(4, 1));
        cache.insert(&b, 0, block(4, 2));
        // `a` used again: `b` is now the oldest.
        assert!(cache.get(&a, 0).is_some());
        cache.insert(&a, 1, block(4, 3));
        assert_eq!(cache.bytes(), 8);
        assert!(cache.get(&b, 0).is_none());
        assert!(cache.get(&a, 0).is_some());
        assert!(cache.get(&a, 1).is_some());
        // Larger than the limit: not kept, nothing evicted for it.
        cache.insert(&b, 5, block(11, 4));
        assert!(cache.get(&b, 5).is_none());
        assert_eq!(cache.bytes(), 8);
    }

    #[test]
    fn a_block_inserted_twice_is_counted_once() {
        let mut cache = ChunkCache::new(100);
        let a = path("t/a");
        cache.insert(&a, 0, block(4, 1));
        cache.insert(&a, 0, block(6, 2));
        assert_eq!(cache.bytes(), 6);
        assert_eq!(*cache.get(&a, 0).unwrap(), vec![2; 6]);
    }

    #[test]
    fn forgetting_a_prefix_drops_exactly_the_objects_under_it() {
        let mut cache = ChunkCache::new(100);
        let (one, two, other) = (
            path("topics/n/t/0/0.chunk"),
            path("topics/n/t/1/0.chunk"),
            path("topics/n/tt/0/0.chunk"),
        );
        cache.insert(&one, 0, block(3, 1));
        cache.insert(&two, 0, block(3, 1));
        cache.insert(&other, 0, block(3, 1));
        cache.forget(&path("topics/n/t"));
        assert!(cache.get(&one, 0).is_none());
        assert!(cache.get(&two, 0).is_none());
        assert!(cache.get(&other, 0).is_some());
        assert_eq!(cache.bytes(), 3);
    }

    #[test]
    fn a_cache_of_size_zero_keeps_nothing() {
        let mut cache = ChunkCache::new(0);
        assert!(!cache.is_enabled());
        let a = path("t/a");
        cache.insert(&a, 0, block(1, 1));
        assert!(cache.get(&a, 0).is_none());
        assert_eq!(cache.bytes(), 0);
    }
}
