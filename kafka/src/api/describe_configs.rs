//! DescribeConfigs (key 32), v0-v4; flexible from v4.

use crate::api::{end, write_strings};
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// Resource type 2: a topic.
pub const RESOURCE_TYPE_TOPIC: i8 = 2;
/// Resource type 4: a broker.
pub const RESOURCE_TYPE_BROKER: i8 = 4;

/// A resource whose configs are asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsResource {
    /// The resource type (2 topic, 4 broker, ...).
    pub resource_type: i8,
    /// The resource name.
    pub resource_name: String,
    /// The keys wanted; `None` for all.
    pub configuration_keys: Option<Vec<String>>,
}

/// DescribeConfigs request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsRequest {
    /// The resources.
    pub resources: Vec<DescribeConfigsResource>,
    /// Whether to include synonyms (v1+).
    pub include_synonyms: bool,
    /// Whether to include documentation (v3+).
    pub include_documentation: bool,
}

impl<'a> Message<'a> for DescribeConfigsRequest {
    const API_KEY: ApiKey = ApiKey::DescribeConfigs;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let resources = r.array_of(f, |r| {
            let res = DescribeConfigsResource {
                resource_type: r.i8()?,
                resource_name: r.string(f)?,
                configuration_keys: r.nullable_array(f, |r| r.string(f))?,
            };
            end(r, f)?;
            Ok(res)
        })?;
        let include_synonyms = if version >= 1 { r.bool()? } else { false };
        let include_documentation = if version >= 3 { r.bool()? } else { false };
        end(r, f)?;
        Ok(DescribeConfigsRequest {
            resources,
            include_synonyms,
            include_documentation,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_array(f, &self.resources, |w, res| {
            w.put_i8(res.resource_type);
            w.put_str(f, &res.resource_name)?;
            match &res.configuration_keys {
                Some(keys) => write_strings(w, f, keys)?,
                None => w.put_length(f, false, None)?,
            }
            end_struct(w, f);
            Ok(())
        })?;
        if version >= 1 {
            w.put_bool(self.include_synonyms);
        }
        if version >= 3 {
            w.put_bool(self.include_documentation);
        }
        end_struct(w, f);
        Ok(())
    }
}

/// A synonym of a config (v1+).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsSynonym {
    /// The synonym's key.
    pub name: String,
    /// Its value.
    pub value: Option<String>,
    /// Its source.
    pub source: i8,
}

/// One config of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeConfigsEntry {
    /// The key.
    pub name: String,
    /// The value (`None` when sensitive).
    pub value: Option<String>,
    /// Whether it is read-only.
    pub read_only: bool,
    /// Whether it is the default (v0 only; later versions use the source).
    pub is_default: bool,
    /// Where the value comes from (v1+; -1 unknown, 5 default).
    pub config_source: i8,
    /// Whether it is sensitive.
    pub is_sensitive: bool,
    /// Synonyms (v1+).
    pub synonyms: Vec<DescribeConfigsSynonym>,
    /// The value's type (v3+; 0 unknown).
    pub config_type: i8,
    /// Documentation (v3+).
    pub documentation: Option<String>,
}

impl Default for DescribeConfigsEntry {
    fn default() -> Self {
        DescribeConfigsEntry {
            name: String::new(),
            value: None,
            read_only: false,
            is_default: false,
            config_source: -1,
            is_sensitive: false,
            synonyms: Vec::new(),
            config_type: 0,
            documentation: None,
        }
    }
}

/// One resource's configs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsResult {
    /// The error.
    pub error_code: i16,
    /// The error message.
    pub error_message: Option<String>,
    /// The resource type.
    pub resource_type: i8,
    /// The resource name.
    pub resource_name: String,
    /// Its configs.
    pub configs: Vec<DescribeConfigsEntry>,
}

/// DescribeConfigs response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeConfigsResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Results per resource.
    pub results: Vec<DescribeConfigsResult>,
}

impl<'a> Message<'a> for DescribeConfigsResponse {
    const API_KEY: ApiKey = ApiKey::DescribeConfigs;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let throttle_time_ms = r.i32()?;
        let results = r.array_of(f, |r| {
            let error_code = r.i16()?;
            let error_message = r.nullable_string(f)?;
            let resource_type = r.i8()?;
            let resource_name = r.string(f)?;
            let configs = r.array_of(f, |r| {
                let mut c = DescribeConfigsEntry {
                    name: r.string(f)?,
                    value: r.nullable_string(f)?,
                    read_only: r.bool()?,
                    ..Default::default()
                };
                if version == 0 {
                    c.is_default = r.bool()?;
                } else {
                    c.config_source = r.i8()?;
                }
                c.is_sensitive = r.bool()?;
                if version >= 1 {
                    c.synonyms = r.array_of(f, |r| {
                        let s = DescribeConfigsSynonym {
                            name: r.string(f)?,
                            value: r.nullable_string(f)?,
                            source: r.i8()?,
                        };
                        end(r, f)?;
                        Ok(s)
                    })?;
                }
                if version >= 3 {
                    c.config_type = r.i8()?;
                    c.documentation = r.nullable_string(f)?;
                }
                end(r, f)?;
                Ok(c)
            })?;
            end(r, f)?;
            Ok(DescribeConfigsResult {
                error_code,
                error_message,
                resource_type,
                resource_name,
                configs,
            })
        })?;
        end(r, f)?;
        Ok(DescribeConfigsResponse {
            throttle_time_ms,
            results,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_i32(self.throttle_time_ms);
        w.put_array(f, &self.results, |w, res| {
            w.put_i16(res.error_code);
            w.put_nullable_str(f, res.error_message.as_deref())?;
            w.put_i8(res.resource_type);
            w.put_str(f, &res.resource_name)?;
            w.put_array(f, &res.configs, |w, c| {
                w.put_str(f, &c.name)?;
                w.put_nullable_str(f, c.value.as_deref())?;
                w.put_bool(c.read_only);
                if version == 0 {
                    w.put_bool(c.is_default);
                } else {
                    w.put_i8(c.config_source);
                }
                w.put_bool(c.is_sensitive);
                if version >= 1 {
                    w.put_array(f, &c.synonyms, |w, s| {
                        w.put_str(f, &s.name)?;
                        w.put_nullable_str(f, s.value.as_deref())?;
                        w.put_i8(s.source);
                        end_struct(w, f);
                        Ok(())
                    })?;
                }
                if version >= 3 {
                    w.put_i8(c.config_type);
                    w.put_nullable_str(f, c.documentation.as_deref())?;
                }
                end_struct(w, f);
                Ok(())
            })?;
            end_struct(w, f);
            Ok(())
        })?;
        end_struct(w, f);
        Ok(())
    }
}
