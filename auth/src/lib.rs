//! kelp's authentication and authorization, shared by the broker, the
//! control plane, the Kafka gateway and the client:
//!
//! - [`scram`]: the SCRAM-SHA-256/512 exchange, both sides, pure;
//! - [`auth_file`]: the `--auth` file: users, credentials, grants, the
//!   cluster secret;
//! - [`handshake`]: a client's side of authenticating a connection;
//! - [`permission`]: principals, roles, operations on topic patterns;
//! - [`session`]: one connection's standing with a server;
//! - [`request_access`]: what each request of kelp's protocol needs;
//! - [`server_certificate`]: a broker's certificate taken without a CA.

pub mod auth_file;
pub mod handshake;
pub mod permission;
pub mod request_access;
pub mod scram;
pub mod server_certificate;
pub mod session;

pub use auth_file::{AuthFile, AuthFileError, CLUSTER_USER};
pub use handshake::{Credentials, Handshake, HandshakeError};
pub use permission::{Operation, Principal, Role};
pub use request_access::Need;
pub use scram::{ScramClient, ScramCredential, ScramError, ScramHash};
pub use session::{DenialReason, Denied, Session, Step};
