//! kelp's authentication and authorization, shared by the broker, the
//! control plane, the Kafka gateway and the client:
//!
//! - [`scram`]: the SCRAM-SHA-256/512 exchange, both sides, pure;
//! - [`auth_file`]: the `--auth` file: users, credentials, grants, the
//!   cluster secret;
//! - [`permission`]: principals, roles, operations on topic patterns;
//! - [`session`]: one connection's standing with a server.

pub mod auth_file;
pub mod permission;
pub mod scram;
pub mod session;

pub use auth_file::{AuthFile, AuthFileError, CLUSTER_USER};
pub use permission::{Operation, Principal, Role};
pub use scram::{ScramClient, ScramCredential, ScramError, ScramHash};
pub use session::{Denied, Session, Step};
