//! Metadata (key 3), v0-v12; flexible from v9.

use crate::api::{end, read_i32s, write_i32s};
use crate::api_key::ApiKey;
use crate::decoder::{Decoder, Uuid};
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// "Not requested" for authorized operations (INT32 min).
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// A topic asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataRequestTopic {
    /// The topic id (v10+; zero when asking by name).
    pub topic_id: Uuid,
    /// The name (nullable from v10, when asking by id).
    pub name: Option<String>,
}

/// Metadata request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequest {
    /// The topics; `None` asks for all (v1+; in v0 an empty array does).
    pub topics: Option<Vec<MetadataRequestTopic>>,
    /// Whether missing topics may be created (v4+).
    pub allow_auto_topic_creation: bool,
    /// Whether to include cluster authorized operations (v8-v10).
    pub include_cluster_authorized_operations: bool,
    /// Whether to include topic authorized operations (v8+).
    pub include_topic_authorized_operations: bool,
}

impl Default for MetadataRequest {
    fn default() -> Self {
        MetadataRequest {
            topics: Some(Vec::new()),
            allow_auto_topic_creation: true,
            include_cluster_authorized_operations: false,
            include_topic_authorized_operations: false,
        }
    }
}

impl MetadataRequest {
    /// Whether the request asks for every topic: a null array, or in v0 an
    /// empty one.
    pub fn wants_all_topics(&self, version: i16) -> bool {
        match &self.topics {
            None => true,
            Some(t) => version == 0 && t.is_empty(),
        }
    }
}

impl<'a> Message<'a> for MetadataRequest {
    const API_KEY: ApiKey = ApiKey::Metadata;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let topic = |r: &mut Decoder<'a>| {
            let topic_id = if version >= 10 { r.uuid()? } else { Uuid::ZERO };
            let name = if version >= 10 {
                r.nullable_string(f)?
            } else {
                Some(r.string(f)?)
            };
            end(r, f)?;
            Ok(MetadataRequestTopic { topic_id, name })
        };
        let topics = if version >= 1 {
            r.nullable_array(f, topic)?
        } else {
            Some(r.array_of(f, topic)?)
        };
        let mut out = MetadataRequest {
            topics,
            ..Default::default()
        };
        if version >= 4 {
            out.allow_auto_topic_creation = r.bool()?;
        }
        if (8..=10).contains(&version) {
            out.include_cluster_authorized_operations = r.bool()?;
        }
        if version >= 8 {
            out.include_topic_authorized_operations = r.bool()?;
        }
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        let topics = match (&self.topics, version >= 1) {
            (Some(t), _) => Some(t.as_slice()),
            (None, true) => None,
            (None, false) => Some(&[][..]),
        };
        w.put_nullable_array(f, topics, |w, t| {
            if version >= 10 {
                w.put_uuid(t.topic_id);
                w.put_nullable_str(f, t.name.as_deref())?;
            } else {
                w.put_str(f, t.name.as_deref().unwrap_or(""))?;
            }
            end_struct(w, f);
            Ok(())
        })?;
        if version >= 4 {
            w.put_bool(self.allow_auto_topic_creation);
        }
        if (8..=10).contains(&version) {
            w.put_bool(self.include_cluster_authorized_operations);
        }
        if version >= 8 {
            w.put_bool(self.include_topic_authorized_operations);
        }
        end_struct(w, f);
        Ok(())
    }
}

/// A broker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataBroker {
    /// The node id.
    pub node_id: i32,
    /// Its host.
    pub host: String,
    /// Its port.
    pub port: i32,
    /// Its rack (v1+).
    pub rack: Option<String>,
}

/// A partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataPartition {
    /// The error.
    pub error_code: i16,
    /// The partition.
    pub partition_index: i32,
    /// The leader's node id.
    pub leader_id: i32,
    /// The leader epoch (v7+; -1 unknown).
    pub leader_epoch: i32,
    /// The replicas.
    pub replica_nodes: Vec<i32>,
    /// The in-sync replicas.
    pub isr_nodes: Vec<i32>,
    /// The offline replicas (v5+).
    pub offline_replicas: Vec<i32>,
}

impl Default for MetadataPartition {
    fn default() -> Self {
        MetadataPartition {
            error_code: 0,
            partition_index: 0,
            leader_id: -1,
            leader_epoch: -1,
            replica_nodes: Vec::new(),
            isr_nodes: Vec::new(),
            offline_replicas: Vec::new(),
        }
    }
}

/// A topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataTopic {
    /// The error.
    pub error_code: i16,
    /// The name (nullable from v12).
    pub name: Option<String>,
    /// The topic id (v10+).
    pub topic_id: Uuid,
    /// Whether the topic is internal (v1+).
    pub is_internal: bool,
    /// Its partitions.
    pub partitions: Vec<MetadataPartition>,
    /// Authorized operations bit field (v8+).
    pub topic_authorized_operations: i32,
}

impl Default for MetadataTopic {
    fn default() -> Self {
        MetadataTopic {
            error_code: 0,
            name: None,
            topic_id: Uuid::ZERO,
            is_internal: false,
            partitions: Vec::new(),
            topic_authorized_operations: AUTHORIZED_OPERATIONS_OMITTED,
        }
    }
}

/// Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataResponse {
    /// Throttle time (v3+).
    pub throttle_time_ms: i32,
    /// The brokers.
    pub brokers: Vec<MetadataBroker>,
    /// The cluster id (v2+).
    pub cluster_id: Option<String>,
    /// The controller's node id (v1+; -1 none).
    pub controller_id: i32,
    /// The topics.
    pub topics: Vec<MetadataTopic>,
    /// Cluster authorized operations (v8-v10).
    pub cluster_authorized_operations: i32,
}

impl Default for MetadataResponse {
    fn default() -> Self {
        MetadataResponse {
            throttle_time_ms: 0,
            brokers: Vec::new(),
            cluster_id: None,
            controller_id: -1,
            topics: Vec::new(),
            cluster_authorized_operations: AUTHORIZED_OPERATIONS_OMITTED,
        }
    }
}

impl<'a> Message<'a> for MetadataResponse {
    const API_KEY: ApiKey = ApiKey::Metadata;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = MetadataResponse::default();
        if version >= 3 {
            out.throttle_time_ms = r.i32()?;
        }
        out.brokers = r.array_of(f, |r| {
            let mut b = MetadataBroker {
                node_id: r.i32()?,
                host: r.string(f)?,
                port: r.i32()?,
                rack: None,
            };
            if version >= 1 {
                b.rack = r.nullable_string(f)?;
            }
            end(r, f)?;
            Ok(b)
        })?;
        if version >= 2 {
            out.cluster_id = r.nullable_string(f)?;
        }
        if version >= 1 {
            out.controller_id = r.i32()?;
        }
        out.topics = r.array_of(f, |r| {
            let mut t = MetadataTopic {
                error_code: r.i16()?,
                ..Default::default()
            };
            t.name = if version >= 12 {
                r.nullable_string(f)?
            } else {
                Some(r.string(f)?)
            };
            if version >= 10 {
                t.topic_id = r.uuid()?;
            }
            if version >= 1 {
                t.is_internal = r.bool()?;
            }
            t.partitions = r.array_of(f, |r| {
                let mut p = MetadataPartition {
                    error_code: r.i16()?,
                    partition_index: r.i32()?,
                    leader_id: r.i32()?,
                    ..Default::default()
                };
                if version >= 7 {
                    p.leader_epoch = r.i32()?;
                }
                p.replica_nodes = read_i32s(r, f)?;
                p.isr_nodes = read_i32s(r, f)?;
                if version >= 5 {
                    p.offline_replicas = read_i32s(r, f)?;
                }
                end(r, f)?;
                Ok(p)
            })?;
            if version >= 8 {
                t.topic_authorized_operations = r.i32()?;
            }
            end(r, f)?;
            Ok(t)
        })?;
        if (8..=10).contains(&version) {
            out.cluster_authorized_operations = r.i32()?;
        }
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 3 {
            w.put_i32(self.throttle_time_ms);
        }
        w.put_array(f, &self.brokers, |w, b| {
            w.put_i32(b.node_id);
            w.put_str(f, &b.host)?;
            w.put_i32(b.port);
            if version >= 1 {
                w.put_nullable_str(f, b.rack.as_deref())?;
            }
            end_struct(w, f);
            Ok(())
        })?;
        if version >= 2 {
            w.put_nullable_str(f, self.cluster_id.as_deref())?;
        }
        if version >= 1 {
            w.put_i32(self.controller_id);
        }
        w.put_array(f, &self.topics, |w, t| {
            w.put_i16(t.error_code);
            if version >= 12 {
                w.put_nullable_str(f, t.name.as_deref())?;
            } else {
                w.put_str(f, t.name.as_deref().unwrap_or(""))?;
            }
            if version >= 10 {
                w.put_uuid(t.topic_id);
            }
            if version >= 1 {
                w.put_bool(t.is_internal);
            }
            w.put_array(f, &t.partitions, |w, p| {
                w.put_i16(p.error_code);
                w.put_i32(p.partition_index);
                w.put_i32(p.leader_id);
                if version >= 7 {
                    w.put_i32(p.leader_epoch);
                }
                write_i32s(w, f, &p.replica_nodes)?;
                write_i32s(w, f, &p.isr_nodes)?;
                if version >= 5 {
                    write_i32s(w, f, &p.offline_replicas)?;
                }
                end_struct(w, f);
                Ok(())
            })?;
            if version >= 8 {
                w.put_i32(t.topic_authorized_operations);
            }
            end_struct(w, f);
            Ok(())
        })?;
        if (8..=10).contains(&version) {
            w.put_i32(self.cluster_authorized_operations);
        }
        end_struct(w, f);
        Ok(())
    }
}
