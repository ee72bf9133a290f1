//! What the engine's in-process broker tests share.
#![allow(clippy::unwrap_used)]

use kelp_engine::BrokerConfig;

/// Two consecutive ports, free for TCP and UDP now.
pub fn port() -> u16 {
    test_support::free_port_pair()
}

/// A broker of two unpinned shards with its data in `dir`, serving on
/// loopback from `port` (shard `i` on `port + i`).
pub fn config(dir: &std::path::Path, port: u16) -> BrokerConfig {
    BrokerConfig {
        data_dir: dir.to_path_buf(),
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        shards: 2,
        pin_shards: false,
        ..BrokerConfig::default()
    }
}
