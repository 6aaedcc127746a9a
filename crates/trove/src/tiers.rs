//! The store's tiers, wired here: the disk tier (`trove_disk`) opened under the memory tier
//! from `[cache.disk]`, and handed to the proxy as the storage interface, so the proxy never
//! names the disk tier.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use trove_proxy::settings::{CacheSettings, DiskSettings, Reclaim};
use trove_proxy::{LowerError, OpenLower};
use trove_store::{MemoryStore, Storage, StreamLimits};

/// Opens `[cache.disk]` under the memory tier (see [`OpenLower`]).
pub struct DiskTier;

impl OpenLower for DiskTier {
    fn open(
        &self,
        memory: MemoryStore,
        cache: &CacheSettings,
        body_meter: Arc<AtomicU64>,
    ) -> Result<Arc<dyn Storage>, LowerError> {
        let Some(d) = &cache.disk else {
            return Ok(Arc::new(memory));
        };
        let spool = trove_disk::SpoolConfig {
            max_object: d.max_object,
            window: cache.stream_buffer,
            fallback: StreamLimits {
                read_ahead: cache.read_ahead,
                buffer: cache.stream_buffer,
            },
            meter: Some(body_meter),
        };
        match trove_disk::DiskStore::open(config(d)) {
            Ok(disk) => Ok(Arc::new(
                trove_disk::Tiered::new(memory, disk).with_spool(spool),
            )),
            Err(e) if e.is_io() => Err(LowerError::Unusable(e.to_string())),
            Err(e) => Err(LowerError::Fatal(e.to_string())),
        }
    }
}

/// The disk tier's config from its settings.
pub fn config(d: &DiskSettings) -> trove_disk::DiskConfig {
    trove_disk::DiskConfig {
        paths: d.path.clone(),
        budget: d.size,
        region_size: d.region_size,
        sync_interval: d.sync_interval,
        reclaim: match d.reclaim {
            Reclaim::FifoReinsert => trove_disk::Reclaim::FifoReinsert,
            Reclaim::Fifo => trove_disk::Reclaim::Fifo,
        },
        queue_bytes: 64 << 20,
    }
}
