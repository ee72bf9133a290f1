//! One module per Kafka API: its request and response bodies, decoded and
//! encoded at every supported version.
//!
//! The modules are generated at build time by `kelp-kafka-codegen` from
//! the schema files in `kafka/schema/`, one per API (docs/kafka.md, "The
//! message schema"); field lists and version ranges follow Kafka's message
//! definitions. The generated decoders read only through
//! [`crate::decoder::Decoder`], so they keep its limits on untrusted
//! lengths. What is not a field lives here, by hand.

include!(concat!(env!("OUT_DIR"), "/api.rs"));

impl api_versions::ApiVersionsResponse {
    /// The response listing [`crate::SUPPORTED_APIS`] with `error_code`.
    pub fn supported(error_code: i16) -> Self {
        api_versions::ApiVersionsResponse {
            error_code,
            api_keys: crate::SUPPORTED_APIS
                .iter()
                .map(|r| api_versions::ApiVersion {
                    api_key: r.api_key.code(),
                    min_version: r.min,
                    max_version: r.max,
                })
                .collect(),
            throttle_time_ms: 0,
        }
    }
}

impl metadata::MetadataRequest {
    /// Whether the request asks for every topic: a null array, or in v0 an
    /// empty one.
    pub fn wants_all_topics(&self, version: i16) -> bool {
        match &self.topics {
            None => true,
            Some(t) => version == 0 && t.is_empty(),
        }
    }
}
