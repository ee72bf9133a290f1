//! The Kafka APIs this codec speaks, the versions of each it supports, and
//! the version from which each API uses the flexible encoding (compact
//! strings and arrays, tagged fields).
//!
//! [`SUPPORTED_APIS`] is the one table the ApiVersions response is built
//! from; a request outside it is refused before its body is read. The enum
//! and the table are generated from the schema files in `kafka/schema/`
//! (each file's `key`, `versions` and `flexible`), so adding an API there
//! adds it here.

/// The versions of one API this codec decodes requests and encodes
/// responses for, and where its flexible encoding starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersionRange {
    /// The API.
    pub api_key: ApiKey,
    /// Lowest supported version.
    pub min: i16,
    /// Highest supported version.
    pub max: i16,
    /// First version with the flexible encoding (from the Kafka message
    /// definitions' `flexibleVersions`).
    pub flexible_min: i16,
}

// `ApiKey` (one variant per schema file), `SUPPORTED_APIS` (each file's
// `versions` and `flexible`), `ApiKey::ALL` and `ApiKey::code`.
include!(concat!(env!("OUT_DIR"), "/api_keys.rs"));

impl ApiKey {
    /// The API with wire key `code`, if supported.
    pub fn from_code(code: i16) -> Option<ApiKey> {
        ApiKey::ALL.into_iter().find(|k| k.code() == code)
    }

    /// This API's row of [`SUPPORTED_APIS`].
    pub fn versions(self) -> ApiVersionRange {
        // ALL and SUPPORTED_APIS list the keys in the same order (a test
        // checks it), so the index lookup cannot miss.
        let index = ApiKey::ALL.iter().position(|k| *k == self).unwrap_or(0);
        SUPPORTED_APIS[index]
    }

    /// Whether `version` is in the supported range.
    pub fn supports(self, version: i16) -> bool {
        let r = self.versions();
        (r.min..=r.max).contains(&version)
    }

    /// Whether `version` uses the flexible encoding. Versions above the
    /// supported maximum count as flexible when the API has flexible
    /// versions, as Kafka does when it parses the header of a request it
    /// will refuse.
    pub fn is_flexible(self, version: i16) -> bool {
        version >= self.versions().flexible_min
    }

    /// The request header version for `version`: 2 when flexible, else 1.
    /// (Header v0, without a client id, is only used by ControlledShutdown
    /// v0, which this codec does not speak.)
    pub fn request_header_version(self, version: i16) -> i16 {
        if self.is_flexible(version) {
            2
        } else {
            1
        }
    }

    /// The response header version for `version`: 1 when flexible, else 0;
    /// always 0 for ApiVersions, so a client that does not know the broker's
    /// versions yet can read the answer.
    pub fn response_header_version(self, version: i16) -> i16 {
        if self != ApiKey::ApiVersions && self.is_flexible(version) {
            1
        } else {
            0
        }
    }
}
