//! Producer ids for InitProducerId, never repeated across restarts: ids are
//! handed out from blocks, and the end of the current block is stored in
//! the filer (`kafka/producer_ids`, 8 bytes: the next unreserved id, i64
//! big-endian) before any id of the block is given. A restart starts at
//! the stored end, skipping what the last run did not hand out.

use super::gateway_error::StoreError;
use std::cell::Cell;
use std::sync::Arc;

use filer::{Filer, FilerError};

use crate::error::EngineError;

/// Ids reserved per filer write.
const BLOCK: i64 = 1000;

pub(crate) struct ProducerIds {
    filer: Arc<dyn Filer>,
    next: Cell<i64>,
    reserved_end: Cell<i64>,
}

impl ProducerIds {
    pub(crate) fn open(filer: Arc<dyn Filer>) -> Result<ProducerIds, EngineError> {
        let path = control::filer_layout::kafka_producer_ids();
        let mut bytes = [0u8; 8];
        let start = match filer.read_at(&path, 0, &mut bytes) {
            Ok(8) => i64::from_be_bytes(bytes),
            Ok(n) => {
                return Err(EngineError::Corrupt {
                    what: path.to_string(),
                    reason: format!("{n} bytes, expected 8"),
                })
            }
            Err(FilerError::NotFound { .. }) => 0,
            Err(e) => return Err(e.into()),
        };
        Ok(ProducerIds {
            filer,
            next: Cell::new(start),
            reserved_end: Cell::new(start),
        })
    }

    /// A producer id never given before.
    pub(crate) async fn next(&self) -> Result<i64, StoreError> {
        if self.next.get() >= self.reserved_end.get() {
            let end = self.next.get() + BLOCK;
            let filer = self.filer.clone();
            tokio::task::spawn_blocking(move || {
                let path = control::filer_layout::kafka_producer_ids();
                filer.put(&path, &end.to_be_bytes())
            })
            .await??;
            // Another caller may have reserved meanwhile; keep the larger.
            self.reserved_end.set(self.reserved_end.get().max(end));
        }
        let id = self.next.get();
        self.next.set(id + 1);
        Ok(id)
    }
}
