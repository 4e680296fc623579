//! Metadata buffer cache: recently read blocks (inode tables, extent nodes,
//! directory and index blocks), shared between threads and bounded in size.
//! File data bypasses it and is read straight from the device.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

/// A bounded block cache with FIFO eviction, sharded by block number so that
/// concurrent readers rarely contend.
#[derive(Debug)]
pub(crate) struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<u64, Arc<[u8]>>,
    order: VecDeque<u64>,
}

const SHARDS: usize = 16;

impl BlockCache {
    /// A cache of about `bytes` bytes for blocks of `block_size` bytes.
    pub(crate) fn new(bytes: usize, block_size: usize) -> Self {
        let blocks = (bytes / block_size.max(1)).max(SHARDS * 4);
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: blocks / SHARDS,
        }
    }

    fn shard(&self, block: u64) -> &Mutex<Shard> {
        &self.shards[(block % SHARDS as u64) as usize]
    }

    pub(crate) fn get(&self, block: u64) -> Option<Arc<[u8]>> {
        self.shard(block).lock().map.get(&block).cloned()
    }

    pub(crate) fn insert(&self, block: u64, data: Arc<[u8]>) {
        self.insert_with(block, data, true);
    }

    /// Caches `data` unless the block is already cached (read-ahead must not
    /// replace a newer copy).
    pub(crate) fn insert_if_absent(&self, block: u64, data: Arc<[u8]>) {
        self.insert_with(block, data, false);
    }

    fn insert_with(&self, block: u64, data: Arc<[u8]>, replace: bool) {
        let mut s = self.shard(block).lock();
        if !replace && s.map.contains_key(&block) {
            return;
        }
        if s.map.insert(block, data).is_none() {
            s.order.push_back(block);
        }
        while s.order.len() > self.per_shard {
            if let Some(old) = s.order.pop_front() {
                s.map.remove(&old);
            }
        }
    }
}
