//! [`ProducerIdBlock`]: the producer ids one shard hands out to kelp's
//! idempotent producers (`InitProducer`), never the same twice, across
//! restarts and across the brokers of a cluster.
//!
//! An id names its broker and shard (`wire::producer_id`), so shards never
//! need to agree; within a shard, ids are counted and reserved
//! [`BLOCK`] at a time: the end of the reserved block is stored in the
//! filer (`producer-ids/<broker>/<shard>`, 8 bytes, little-endian) before
//! any id of it is given. A restart starts at the stored end and skips what
//! the last run did not hand out.

use std::cell::Cell;
use std::rc::Rc;

use filer::FilerError;
use wire::producer_id::{kelp_producer_id, KELP_PRODUCER_IDS_PER_SHARD};
use wire::ErrorCode;

use crate::serve_error::ServeError;
use crate::shard_filer::ShardFiler;

/// Ids reserved per filer write.
const BLOCK: u64 = 1000;

/// What the filer holds of a shard's reserved end.
#[derive(Debug)]
enum Stored {
    Missing,
    End(u64),
    Short(usize),
}

/// One shard's producer ids (see the module docs).
#[derive(Debug)]
pub(crate) struct ProducerIdBlock {
    broker: u32,
    shard: u32,
    /// The next count to hand out, once the stored end is read.
    next: Cell<Option<u64>>,
    /// Counts below this are reserved in the filer.
    reserved_end: Cell<u64>,
    /// One reservation at a time.
    reserving: glommio::sync::Semaphore,
}

impl ProducerIdBlock {
    pub(crate) fn new(broker: u32, shard: u32) -> ProducerIdBlock {
        ProducerIdBlock {
            broker,
            shard,
            next: Cell::new(None),
            reserved_end: Cell::new(0),
            reserving: glommio::sync::Semaphore::new(1),
        }
    }

    /// A producer id this cluster never handed out before.
    pub(crate) async fn next(&self, store: &Rc<ShardFiler>) -> Result<u64, ServeError> {
        let _turn = self
            .reserving
            .acquire_permit(1)
            .await
            .map_err(|_| ServeError::internal())?;
        let path = control::filer_layout::producer_id_block(self.broker, self.shard);
        let next = match self.next.get() {
            Some(next) => next,
            None => {
                let read_path = path.clone();
                let stored = store
                    .read(move |filer| {
                        let mut bytes = [0u8; 8];
                        match filer.read_at(&read_path, 0, &mut bytes) {
                            Ok(8) => Ok(Stored::End(u64::from_le_bytes(bytes))),
                            Ok(n) => Ok(Stored::Short(n)),
                            Err(FilerError::NotFound { .. }) => Ok(Stored::Missing),
                            Err(e) => Err(e),
                        }
                    })
                    .await
                    .map_err(|e| ServeError::storage(&e.into()))?;
                let start = match stored {
                    Stored::Missing => 0,
                    Stored::End(end) => end,
                    Stored::Short(n) => {
                        return Err(ServeError::new(
                            ErrorCode::Storage,
                            format!(
                                "{path} holds {n} bytes, not 8: no producer id can be handed out"
                            ),
                        ))
                    }
                };
                self.reserved_end.set(start);
                start
            }
        };
        if next >= KELP_PRODUCER_IDS_PER_SHARD {
            return Err(ServeError::new(
                ErrorCode::Busy,
                format!(
                    "shard {} of broker {} handed out all its {KELP_PRODUCER_IDS_PER_SHARD} producer ids",
                    self.shard, self.broker
                ),
            ));
        }
        if next >= self.reserved_end.get() {
            let end = (next + BLOCK).min(KELP_PRODUCER_IDS_PER_SHARD);
            store
                .upload(move |filer| filer.put(&path, &end.to_le_bytes()))
                .await
                .map_err(|e| ServeError::storage(&e.into()))?;
            self.reserved_end.set(end);
        }
        self.next.set(Some(next + 1));
        kelp_producer_id(self.broker, self.shard, next).ok_or_else(|| {
            ServeError::new(
                ErrorCode::Internal,
                format!(
                    "broker {} shard {} cannot be named in a producer id",
                    self.broker, self.shard
                ),
            )
        })
    }
}
