//! The auth file (`--auth FILE`): users, their credentials and
//! permissions, and the cluster's secret. TOML; docs/operations.md has
//! every key. The smallest file:
//!
//! ```toml
//! [[user]]
//! name = "alice"
//! password = "s3cret"
//! role = "admin"
//! ```
//!
//! A plain `password` is hashed when the file is read (SCRAM-SHA-256 and
//! SCRAM-SHA-512 credentials with a fresh salt) and not kept; a file may
//! hold the credentials instead (`scram_sha_256`, `scram_sha_512`, as
//! `kelp auth hash` prints them). Unknown keys are an error that names
//! them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;

use crate::permission::{Grant, Operation, Operations, Principal, Role, TopicPattern};
use crate::scram::{
    Lookup, ScramCredential, ScramError, ScramHash, ITERATIONS_DEFAULT, SALT_BYTES,
};

/// The user name the cluster's own processes authenticate as, with the
/// cluster secret for password. No user in the file may take it (`@`
/// opens no user's name).
pub const CLUSTER_USER: &str = "@cluster";
/// The shortest cluster secret accepted.
pub const CLUSTER_SECRET_BYTES_MIN: usize = 16;
/// The longest user name.
pub const USER_NAME_BYTES_MAX: usize = 255;
/// The most users one file may hold.
pub const USERS_MAX: usize = 10_000;

/// Why an auth file was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    #[error("cannot read the auth file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("auth file {path}: {message}")]
    Invalid { path: String, message: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    cluster_secret: Option<String>,
    #[serde(default)]
    user: Vec<UserToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserToml {
    name: String,
    password: Option<String>,
    scram_sha_256: Option<String>,
    scram_sha_512: Option<String>,
    role: Option<String>,
    produce_bytes_per_s: Option<u64>,
    #[serde(default)]
    grant: Vec<GrantToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantToml {
    topics: String,
    allow: Vec<String>,
}

/// One user: who it is and how it proves it.
#[derive(Debug, Clone)]
struct User {
    principal: Arc<Principal>,
    credentials: Vec<ScramCredential>,
}

/// A read auth file: whom a server lets in, and as what.
#[derive(Debug)]
pub struct AuthFile {
    users: HashMap<String, User>,
    cluster_secret: Option<String>,
    /// Keys the decoy credential of a name that is no user's, so the
    /// decoy is the same on every attempt and does not give away that
    /// the name is unknown.
    decoy_key: hmac::Key,
}

impl AuthFile {
    /// Read and check the file at `path`.
    pub fn load(path: &Path) -> Result<AuthFile, AuthFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthFileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        AuthFile::parse(&text, &SystemRandom::new()).map_err(|message| AuthFileError::Invalid {
            path: path.display().to_string(),
            message,
        })
    }

    /// Read and check an auth file's text; `random` makes salts.
    pub fn parse(text: &str, random: &dyn SecureRandom) -> Result<AuthFile, String> {
        let file: FileToml = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        if file.user.len() > USERS_MAX {
            return Err(format!("more than {USERS_MAX} users"));
        }
        let mut users = HashMap::new();
        for user in file.user {
            let name = user.name.clone();
            let read = read_user(user, random).map_err(|e| format!("user {name:?}: {e}"))?;
            if users.insert(name.clone(), read).is_some() {
                return Err(format!("user {name:?} is listed twice"));
            }
        }
        if let Some(secret) = &file.cluster_secret {
            if secret.len() < CLUSTER_SECRET_BYTES_MIN {
                return Err(format!(
                    "cluster_secret is shorter than {CLUSTER_SECRET_BYTES_MIN} bytes"
                ));
            }
            let credentials = credentials_of(secret, random)?;
            let principal = Arc::new(Principal {
                name: CLUSTER_USER.to_owned(),
                role: Role::Cluster,
                produce_bytes_per_s: None,
            });
            users.insert(
                CLUSTER_USER.to_owned(),
                User {
                    principal,
                    credentials,
                },
            );
        }
        let mut key = [0u8; 32];
        random
            .fill(&mut key)
            .map_err(|_| "no randomness for the decoy key".to_owned())?;
        Ok(AuthFile {
            users,
            cluster_secret: file.cluster_secret,
            decoy_key: hmac::Key::new(hmac::HMAC_SHA256, &key),
        })
    }

    /// This file with `secret` for its cluster secret: how a lone broker
    /// and the control plane inside it, given a file without one, prove
    /// themselves to each other with a secret of their own run.
    pub fn with_cluster_secret(&self, secret: &str) -> Result<AuthFile, String> {
        if secret.len() < CLUSTER_SECRET_BYTES_MIN {
            return Err(format!(
                "cluster_secret is shorter than {CLUSTER_SECRET_BYTES_MIN} bytes"
            ));
        }
        let mut users = self.users.clone();
        users.insert(
            CLUSTER_USER.to_owned(),
            User {
                principal: Arc::new(Principal {
                    name: CLUSTER_USER.to_owned(),
                    role: Role::Cluster,
                    produce_bytes_per_s: None,
                }),
                credentials: credentials_of(secret, &SystemRandom::new())?,
            },
        );
        Ok(AuthFile {
            users,
            cluster_secret: Some(secret.to_owned()),
            decoy_key: self.decoy_key.clone(),
        })
    }

    /// The cluster secret, with which this process authenticates to the
    /// others of its cluster.
    pub fn cluster_secret(&self) -> Option<&str> {
        self.cluster_secret.as_deref()
    }

    /// The user names in the file (not the cluster's).
    pub fn user_names(&self) -> impl Iterator<Item = &str> {
        self.users
            .keys()
            .map(String::as_str)
            .filter(|n| *n != CLUSTER_USER)
    }

    /// `user`'s credential for `hash`, or a decoy that fails at the proof
    /// (the same decoy every time for the same name).
    pub fn lookup(&self, hash: ScramHash, user: &str) -> Lookup {
        let found = self
            .users
            .get(user)
            .and_then(|u| u.credentials.iter().find(|c| c.hash == hash));
        match found {
            Some(credential) => Lookup {
                credential: credential.clone(),
                known: true,
            },
            None => {
                let seed = hmac::sign(&self.decoy_key, user.as_bytes());
                let bytes = seed.as_ref();
                let key = |tag: u8| {
                    let mut k = hmac::sign(&self.decoy_key, &[bytes, &[tag]].concat())
                        .as_ref()
                        .to_vec();
                    k.resize(hash.output_bytes(), tag);
                    k
                };
                Lookup {
                    credential: ScramCredential {
                        hash,
                        salt: bytes[..SALT_BYTES].to_vec(),
                        iterations: ITERATIONS_DEFAULT,
                        stored_key: key(1),
                        server_key: key(2),
                    },
                    known: false,
                }
            }
        }
    }

    /// The principal of an authenticated user.
    pub fn principal(&self, user: &str) -> Option<Arc<Principal>> {
        self.users.get(user).map(|u| Arc::clone(&u.principal))
    }

    /// Whether `user` may log in with a plain password (SASL PLAIN on the
    /// Kafka port): checked against the user's SCRAM credential, so no
    /// password is kept. A name without a credential is checked against
    /// its decoy, so it costs the same time as a wrong password.
    pub fn check_password(&self, user: &str, password: &str) -> Option<Arc<Principal>> {
        let hash = self
            .users
            .get(user)
            .and_then(|u| u.credentials.first())
            .map_or(ScramHash::Sha256, |c| c.hash);
        let Lookup { credential, known } = self.lookup(hash, user);
        let again =
            ScramCredential::from_password(hash, password, &credential.salt, credential.iterations)
                .ok()?;
        let same = crate::scram::same_secret(&again.stored_key, &credential.stored_key);
        if !(same && known) {
            return None;
        }
        self.principal(user)
    }
}

/// A fresh random secret of 32 bytes, hex.
pub fn random_secret() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "no randomness for a secret".to_owned())?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn credentials_of(
    password: &str,
    random: &dyn SecureRandom,
) -> Result<Vec<ScramCredential>, String> {
    ScramHash::ALL
        .into_iter()
        .map(|hash| {
            let mut salt = [0u8; SALT_BYTES];
            random
                .fill(&mut salt)
                .map_err(|_| "no randomness for a salt".to_owned())?;
            ScramCredential::from_password(hash, password, &salt, ITERATIONS_DEFAULT)
                .map_err(|e: ScramError| e.to_string())
        })
        .collect()
}

fn read_user(user: UserToml, random: &dyn SecureRandom) -> Result<User, String> {
    let name = user.name;
    if name.is_empty() || name.len() > USER_NAME_BYTES_MAX {
        return Err(format!("a name must be 1 to {USER_NAME_BYTES_MAX} bytes"));
    }
    if name.starts_with('@') || name.chars().any(char::is_control) {
        return Err("a name may not start with `@` or hold control characters".to_owned());
    }
    let mut credentials = Vec::new();
    if let Some(password) = &user.password {
        if password.is_empty() {
            return Err("the password is empty".to_owned());
        }
        credentials = credentials_of(password, random)?;
    }
    for (key, text, hash) in [
        ("scram_sha_256", &user.scram_sha_256, ScramHash::Sha256),
        ("scram_sha_512", &user.scram_sha_512, ScramHash::Sha512),
    ] {
        let Some(text) = text else { continue };
        let credential = ScramCredential::parse(text).map_err(|e| format!("{key}: {e}"))?;
        if credential.hash != hash {
            return Err(format!(
                "{key} holds a {} credential",
                credential.hash.mechanism()
            ));
        }
        credentials.retain(|c| c.hash != hash);
        credentials.push(credential);
    }
    if credentials.is_empty() {
        return Err("needs `password`, `scram_sha_256` or `scram_sha_512`".to_owned());
    }
    let produce_bytes_per_s = match user.produce_bytes_per_s {
        Some(0) => return Err("produce_bytes_per_s must be at least 1".to_owned()),
        other => other,
    };
    let role = match user.role.as_deref() {
        Some("admin") => {
            if !user.grant.is_empty() {
                return Err("an admin may do anything: drop its grants".to_owned());
            }
            Role::Admin
        }
        None | Some("user") => {
            let mut grants = Vec::with_capacity(user.grant.len());
            for g in user.grant {
                let mut operations = Operations::default();
                for op in &g.allow {
                    operations = match op.as_str() {
                        "admin" => Operations::ALL,
                        name => operations.with(Operation::from_name(name).ok_or_else(|| {
                            format!(
                                "unknown operation {name:?} (one of produce, consume, describe, \
                                 create, delete, split, merge, move, policy, admin)"
                            )
                        })?),
                    };
                }
                grants.push(Grant {
                    topics: TopicPattern::parse(&g.topics),
                    operations,
                });
            }
            Role::User(grants)
        }
        Some(other) => return Err(format!("unknown role {other:?} (admin or user)")),
    };
    Ok(User {
        principal: Arc::new(Principal {
            name,
            role,
            produce_bytes_per_s,
        }),
        credentials,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::scram::{nonce, ScramClient, ScramServer};

    fn parse(text: &str) -> Result<AuthFile, String> {
        AuthFile::parse(text, &SystemRandom::new())
    }

    fn log_in(file: &AuthFile, hash: ScramHash, user: &str, password: &str) -> Option<String> {
        let mut client = ScramClient::new(hash, user, password, nonce(b"client"));
        let mut server = ScramServer::new(hash, nonce(b"server"));
        let first = server
            .server_first(&client.client_first(), |u| file.lookup(hash, u))
            .ok()?;
        let last = client.client_final(&first).ok()?;
        let ok = server.server_final(&last).ok()?;
        client.verify(&ok.server_final).ok()?;
        Some(ok.user)
    }

    #[test]
    fn the_smallest_file_works_as_it_reads() {
        let file =
            parse("[[user]]\nname = \"alice\"\npassword = \"s3cret\"\nrole = \"admin\"\n").unwrap();
        for hash in ScramHash::ALL {
            assert_eq!(
                log_in(&file, hash, "alice", "s3cret").as_deref(),
                Some("alice")
            );
            assert_eq!(log_in(&file, hash, "alice", "s3cre"), None);
            assert_eq!(log_in(&file, hash, "mallory", "s3cret"), None);
        }
        assert_eq!(file.principal("alice").unwrap().role, Role::Admin);
        assert!(file.check_password("alice", "s3cret").is_some());
        assert!(file.check_password("alice", "nope").is_none());
        assert!(file.cluster_secret().is_none());
        assert!(file.principal(CLUSTER_USER).is_none());
        let secret = random_secret().unwrap();
        let with = file.with_cluster_secret(&secret).unwrap();
        assert_eq!(with.cluster_secret(), Some(secret.as_str()));
        assert_eq!(
            log_in(&with, ScramHash::Sha256, CLUSTER_USER, &secret).as_deref(),
            Some(CLUSTER_USER)
        );
        assert_eq!(
            log_in(&with, ScramHash::Sha256, "alice", "s3cret").as_deref(),
            Some("alice")
        );
    }

    #[test]
    fn stored_credentials_grants_and_the_cluster_secret_are_read() {
        let credential =
            ScramCredential::from_password(ScramHash::Sha256, "pw", b"0123456789abcdef", 4096)
                .unwrap();
        let text = format!(
            "cluster_secret = \"0123456789abcdef0123\"\n\
             [[user]]\nname = \"bob\"\nscram_sha_256 = \"{credential}\"\n\
             produce_bytes_per_s = 1000\n\
             [[user.grant]]\ntopics = \"orders/*\"\nallow = [\"produce\", \"describe\"]\n"
        );
        let file = parse(&text).unwrap();
        assert_eq!(
            log_in(&file, ScramHash::Sha256, "bob", "pw").as_deref(),
            Some("bob")
        );
        // No SHA-512 credential was given for bob.
        assert_eq!(log_in(&file, ScramHash::Sha512, "bob", "pw"), None);
        let bob = file.principal("bob").unwrap();
        assert!(bob.may(Operation::Produce, "orders/eu"));
        assert!(!bob.may(Operation::Consume, "orders/eu"));
        assert_eq!(bob.produce_bytes_per_s, Some(1000));
        assert_eq!(
            log_in(
                &file,
                ScramHash::Sha256,
                CLUSTER_USER,
                "0123456789abcdef0123"
            )
            .as_deref(),
            Some(CLUSTER_USER)
        );
        assert!(file.principal(CLUSTER_USER).unwrap().is_cluster());
        assert_eq!(file.user_names().collect::<Vec<_>>(), vec!["bob"]);
    }

    #[test]
    fn the_decoy_of_an_unknown_name_is_the_same_every_time() {
        let file = parse("[[user]]\nname = \"a\"\npassword = \"p\"\n").unwrap();
        let one = file.lookup(ScramHash::Sha256, "ghost");
        let two = file.lookup(ScramHash::Sha256, "ghost");
        assert!(!one.known);
        assert_eq!(one.credential, two.credential);
        assert_eq!(one.credential.stored_key.len(), 32);
    }

    #[test]
    fn mistakes_are_refused_with_what_is_wrong() {
        for (text, says) in [
            ("[[user]]\nname = \"a\"\npasword = \"p\"\n", "pasword"),
            ("[[user]]\nname = \"a\"\n", "needs `password`"),
            ("[[user]]\nname = \"@cluster\"\npassword = \"p\"\n", "may not start"),
            (
                "[[user]]\nname = \"a\"\npassword = \"p\"\n[[user]]\nname = \"a\"\npassword = \"q\"\n",
                "twice",
            ),
            ("[[user]]\nname = \"a\"\npassword = \"p\"\nrole = \"root\"\n", "unknown role"),
            (
                "[[user]]\nname = \"a\"\npassword = \"p\"\n[[user.grant]]\ntopics = \"*\"\nallow = [\"write\"]\n",
                "unknown operation",
            ),
            ("cluster_secret = \"short\"\n", "shorter"),
            ("[[user]]\nname = \"a\"\nscram_sha_256 = \"x\"\n", "scram_sha_256"),
            ("users = 1\n", "users"),
        ] {
            let e = parse(text).err().unwrap();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
