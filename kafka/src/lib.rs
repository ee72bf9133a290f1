//! kelp-kafka: the Kafka protocol gateway's sans-IO parts.

pub mod group;
