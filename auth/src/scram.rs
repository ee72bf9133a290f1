//! SCRAM (RFC 5802) with SHA-256 (RFC 7677) and SHA-512: the password
//! exchange kelp's own protocol and the Kafka gateway's SASL both use.
//!
//! Two messages each way, no channel binding (`n,,`):
//!
//! ```text
//! client-first  n,,n=USER,r=CNONCE
//! server-first  r=CNONCE+SNONCE,s=SALT,i=ITERATIONS
//! client-final  c=biws,r=CNONCE+SNONCE,p=PROOF
//! server-final  v=SIGNATURE            (or e=ERROR)
//! ```
//!
//! Both sides are pure state machines: nonces come from the caller, so a
//! test can replay RFC 7677's example byte for byte. The server never
//! sees the password, only a [`ScramCredential`] (salt, iterations, stored
//! and server keys); the client proves it knows the password and the
//! server proves it holds the credential. Passwords are taken as their
//! UTF-8 bytes (no SASLprep): two spellings of a non-ASCII password that
//! SASLprep would fold are different passwords here.

use std::fmt;
use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2};

/// The fewest PBKDF2 iterations a credential may have (RFC 7677's
/// minimum, and Kafka's).
pub const ITERATIONS_MIN: u32 = 4096;
/// The most PBKDF2 iterations a client will compute for a server, so a
/// hostile server cannot make it spin.
pub const ITERATIONS_MAX: u32 = 1 << 20;
/// Iterations of a credential made from a plain password.
pub const ITERATIONS_DEFAULT: u32 = 8192;
/// Bytes of salt of a credential made from a plain password.
pub const SALT_BYTES: usize = 16;
/// The longest SCRAM message either side accepts.
pub const MESSAGE_BYTES_MAX: usize = 2048;

/// The hash a SCRAM mechanism is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    /// Both hashes, strongest last.
    pub const ALL: [ScramHash; 2] = [ScramHash::Sha256, ScramHash::Sha512];

    /// The SASL mechanism name: `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub fn mechanism(self) -> &'static str {
        match self {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The hash of a SASL mechanism name, if kelp speaks it.
    pub fn from_mechanism(name: &str) -> Option<ScramHash> {
        ScramHash::ALL.into_iter().find(|h| h.mechanism() == name)
    }

    fn hmac_algorithm(self) -> hmac::Algorithm {
        match self {
            ScramHash::Sha256 => hmac::HMAC_SHA256,
            ScramHash::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2_algorithm(self) -> pbkdf2::Algorithm {
        match self {
            ScramHash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramHash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn digest_algorithm(self) -> &'static digest::Algorithm {
        match self {
            ScramHash::Sha256 => &digest::SHA256,
            ScramHash::Sha512 => &digest::SHA512,
        }
    }

    /// Bytes of the hash's output.
    pub fn output_bytes(self) -> usize {
        self.digest_algorithm().output_len()
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        let key = hmac::Key::new(self.hmac_algorithm(), key);
        hmac::sign(&key, data).as_ref().to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest_algorithm(), data)
            .as_ref()
            .to_vec()
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with this hash's HMAC.
    fn salted_password(self, password: &str, salt: &[u8], iterations: NonZeroU32) -> Vec<u8> {
        let mut out = vec![0u8; self.output_bytes()];
        pbkdf2::derive(
            self.pbkdf2_algorithm(),
            iterations,
            salt,
            password.as_bytes(),
            &mut out,
        );
        out
    }
}

/// Why a SCRAM exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The user is unknown or the password is wrong: one error for both,
    /// so the answer does not say which names exist.
    #[error("wrong user name or password")]
    WrongCredentials,
    #[error("the nonce in the final message is not the one the exchange agreed")]
    NonceMismatch,
    #[error("channel binding is not supported (only `n,,`)")]
    ChannelBinding,
    #[error("{0} iterations is outside {ITERATIONS_MIN}..={ITERATIONS_MAX}")]
    Iterations(u32),
    /// The server's signature is wrong: it does not hold this user's
    /// credential (it is not the server it claims to be).
    #[error("the server failed to prove it knows the credential")]
    ServerSignature,
    #[error("the server refused: {0}")]
    Refused(String),
    #[error("a SCRAM message arrived out of order")]
    OutOfOrder,
    #[error("bad SCRAM credential: {0}")]
    Credential(&'static str),
}

/// What a server keeps of a password: never the password itself.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub hash: ScramHash,
    pub salt: Vec<u8>,
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The keys are as good as the password to whoever would replay them
        // to this server's kin: never in a log.
        f.debug_struct("ScramCredential")
            .field("hash", &self.hash)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential of `password` with `salt` and `iterations`.
    pub fn from_password(
        hash: ScramHash,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, ScramError> {
        let rounds = checked_iterations(iterations)?;
        let salted = hash.salted_password(password, salt, rounds);
        let client_key = hash.hmac(&salted, b"Client Key");
        Ok(ScramCredential {
            hash,
            salt: salt.to_vec(),
            iterations,
            stored_key: hash.hash(&client_key),
            server_key: hash.hmac(&salted, b"Server Key"),
        })
    }

    /// The credential of `password` with a fresh random salt and
    /// [`ITERATIONS_DEFAULT`].
    pub fn fresh(hash: ScramHash, password: &str) -> Result<ScramCredential, String> {
        use ring::rand::SecureRandom;
        let mut salt = [0u8; SALT_BYTES];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .map_err(|_| "no randomness for a salt".to_owned())?;
        ScramCredential::from_password(hash, password, &salt, ITERATIONS_DEFAULT)
            .map_err(|e| e.to_string())
    }

    /// Read `SCRAM-SHA-256$ITERATIONS:SALT$STOREDKEY:SERVERKEY` (base64
    /// fields: the form PostgreSQL stores, and `kelp auth hash` prints).
    pub fn parse(text: &str) -> Result<ScramCredential, ScramError> {
        let bad = ScramError::Credential;
        let (mechanism, rest) = text
            .split_once('$')
            .ok_or(bad("no `$` after the mechanism"))?;
        let hash = ScramHash::from_mechanism(mechanism)
            .ok_or(bad("the mechanism is not SCRAM-SHA-256 or SCRAM-SHA-512"))?;
        let (params, keys) = rest.split_once('$').ok_or(bad("no `$` before the keys"))?;
        let (iterations, salt) = params
            .split_once(':')
            .ok_or(bad("no `:` between iterations and salt"))?;
        let (stored, server) = keys
            .split_once(':')
            .ok_or(bad("no `:` between the stored and server keys"))?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| bad("iterations is not a number"))?;
        checked_iterations(iterations)?;
        let decode = |s: &str, what| BASE64.decode(s).map_err(|_| bad(what));
        let salt = decode(salt, "the salt is not base64")?;
        let stored_key = decode(stored, "the stored key is not base64")?;
        let server_key = decode(server, "the server key is not base64")?;
        if salt.is_empty() {
            return Err(bad("the salt is empty"));
        }
        if stored_key.len() != hash.output_bytes() || server_key.len() != hash.output_bytes() {
            return Err(bad("a key's length is not the hash's"));
        }
        Ok(ScramCredential {
            hash,
            salt,
            iterations,
            stored_key,
            server_key,
        })
    }
}

impl fmt::Display for ScramCredential {
    /// The form [`ScramCredential::parse`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}${}:{}${}:{}",
            self.hash.mechanism(),
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(&self.stored_key),
            BASE64.encode(&self.server_key)
        )
    }
}

fn checked_iterations(iterations: u32) -> Result<NonZeroU32, ScramError> {
    if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
        return Err(ScramError::Iterations(iterations));
    }
    NonZeroU32::new(iterations).ok_or(ScramError::Iterations(iterations))
}

/// A nonce for one side of an exchange, from `random` bytes: printable,
/// without `,` (base64 has none).
pub fn nonce(random: &[u8]) -> String {
    BASE64.encode(random)
}

/// `a XOR b`, equal lengths.
fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// Whether `a == b`, in time that depends only on their lengths.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn text(message: &[u8]) -> Result<&str, ScramError> {
    if message.len() > MESSAGE_BYTES_MAX {
        return Err(ScramError::Malformed("longer than MESSAGE_BYTES_MAX"));
    }
    std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))
}

/// The value of attribute `name` (`name=value`) at the head of `part`.
fn attribute(part: Option<&str>, name: char) -> Result<&str, ScramError> {
    let part = part.ok_or(ScramError::Malformed("an attribute is missing"))?;
    let mut chars = part.chars();
    if chars.next() != Some(name) || chars.next() != Some('=') {
        return Err(ScramError::Malformed(
            "an attribute is not the one expected",
        ));
    }
    Ok(&part[2..])
}

/// A user name as SCRAM writes it: `,` as `=2C`, `=` as `=3D`.
fn escape_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn unescape_name(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("a bad `=` escape in the user name")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The client's side of one exchange.
#[derive(Debug)]
pub struct ScramClient {
    hash: ScramHash,
    password: String,
    client_first_bare: String,
    client_nonce: String,
    /// The server signature the final message must carry, once the proof
    /// is sent.
    expected_signature: Option<Vec<u8>>,
}

impl ScramClient {
    pub fn new(hash: ScramHash, user: &str, password: &str, client_nonce: String) -> ScramClient {
        let client_first_bare = format!("n={},r={}", escape_name(user), client_nonce);
        ScramClient {
            hash,
            password: password.to_owned(),
            client_first_bare,
            client_nonce,
            expected_signature: None,
        }
    }

    /// The first message.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// The final message, given the server's first.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        if self.expected_signature.is_some() {
            return Err(ScramError::OutOfOrder);
        }
        let server_first = text(server_first)?;
        if let Some(e) = server_first.strip_prefix("e=") {
            return Err(ScramError::Refused(e.to_owned()));
        }
        let mut parts = server_first.split(',');
        let nonce = attribute(parts.next(), 'r')?;
        let salt = attribute(parts.next(), 's')?;
        let iterations = attribute(parts.next(), 'i')?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(ScramError::NonceMismatch);
        }
        let salt = BASE64
            .decode(salt)
            .map_err(|_| ScramError::Malformed("the salt is not base64"))?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| ScramError::Malformed("the iteration count is not a number"))?;
        let rounds = checked_iterations(iterations)?;
        let salted = self.hash.salted_password(&self.password, &salt, rounds);
        let client_key = self.hash.hmac(&salted, b"Client Key");
        let stored_key = self.hash.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, server_first, without_proof
        );
        let signature = self.hash.hmac(&stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &signature);
        let server_key = self.hash.hmac(&salted, b"Server Key");
        self.expected_signature = Some(self.hash.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Check the server's final message: it must prove the server holds
    /// the credential.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let expected = self
            .expected_signature
            .as_ref()
            .ok_or(ScramError::OutOfOrder)?;
        let server_final = text(server_final)?;
        if let Some(e) = server_final.strip_prefix("e=") {
            return Err(ScramError::Refused(e.to_owned()));
        }
        let signature = attribute(server_final.split(',').next(), 'v')?;
        let signature = BASE64
            .decode(signature)
            .map_err(|_| ScramError::Malformed("the signature is not base64"))?;
        if same_secret(&signature, expected) {
            Ok(())
        } else {
            Err(ScramError::ServerSignature)
        }
    }
}

/// What the server learned from a finished exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramSuccess {
    /// The user the client proved to be.
    pub user: String,
    /// The last message, to send the client.
    pub server_final: Vec<u8>,
}

/// A credential looked up for a user name: the user's, or, for a name
/// that has none, a decoy that fails at the proof.
#[derive(Debug, Clone)]
pub struct Lookup {
    pub credential: ScramCredential,
    pub known: bool,
}

/// The server's side of one exchange.
#[derive(Debug)]
pub struct ScramServer {
    hash: ScramHash,
    server_nonce: String,
    state: ServerState,
}

#[derive(Debug)]
enum ServerState {
    AwaitingFirst,
    AwaitingFinal {
        user: String,
        lookup: Lookup,
        /// `client-first-bare,server-first`: the head of the auth message.
        said: String,
        nonce: String,
    },
    Done,
}

impl ScramServer {
    pub fn new(hash: ScramHash, server_nonce: String) -> ScramServer {
        ScramServer {
            hash,
            server_nonce,
            state: ServerState::AwaitingFirst,
        }
    }

    pub fn hash(&self) -> ScramHash {
        self.hash
    }

    /// Take the client's first message; `lookup` gives the credential of
    /// the user it names. Returns the server's first message.
    pub fn server_first(
        &mut self,
        client_first: &[u8],
        lookup: impl FnOnce(&str) -> Lookup,
    ) -> Result<Vec<u8>, ScramError> {
        if !matches!(self.state, ServerState::AwaitingFirst) {
            return Err(ScramError::OutOfOrder);
        }
        self.state = ServerState::Done;
        let client_first = text(client_first)?;
        // gs2-header: a channel-binding flag, an optional authzid, then the
        // bare message.
        let mut head = client_first.splitn(3, ',');
        match head.next() {
            Some("n") | Some("y") => {}
            Some(p) if p.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("the GS2 header")),
        }
        let authzid = head.next().ok_or(ScramError::Malformed("the GS2 header"))?;
        let bare = head
            .next()
            .ok_or(ScramError::Malformed("no bare message"))?;
        let mut parts = bare.split(',');
        let name = attribute(parts.next(), 'n')?;
        let client_nonce = attribute(parts.next(), 'r')?;
        if client_nonce.is_empty() {
            return Err(ScramError::Malformed("an empty nonce"));
        }
        let user = unescape_name(name)?;
        if !authzid.is_empty() && authzid != format!("a={name}") {
            // Acting as another user is not offered.
            return Err(ScramError::WrongCredentials);
        }
        let lookup = lookup(&user);
        if lookup.credential.hash != self.hash {
            return Err(ScramError::WrongCredentials);
        }
        let nonce = format!("{client_nonce}{}", self.server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&lookup.credential.salt),
            lookup.credential.iterations
        );
        let said = format!("{bare},{server_first}");
        self.state = ServerState::AwaitingFinal {
            user,
            lookup,
            said,
            nonce,
        };
        Ok(server_first.into_bytes())
    }

    /// Take the client's final message: the user it proved to be, and
    /// the server's final message, or why the proof failed.
    pub fn server_final(&mut self, client_final: &[u8]) -> Result<ScramSuccess, ScramError> {
        let ServerState::AwaitingFinal {
            user,
            lookup,
            said,
            nonce,
        } = std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(ScramError::OutOfOrder);
        };
        let client_final = text(client_final)?;
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut parts = without_proof.split(',');
        let binding = attribute(parts.next(), 'c')?;
        let binding = BASE64
            .decode(binding)
            .map_err(|_| ScramError::Malformed("the channel binding is not base64"))?;
        if !(binding.starts_with(b"n,") || binding.starts_with(b"y,")) {
            return Err(ScramError::ChannelBinding);
        }
        if attribute(parts.next(), 'r')? != nonce {
            return Err(ScramError::NonceMismatch);
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("the proof is not base64"))?;
        let credential = &lookup.credential;
        let auth_message = format!("{said},{without_proof}");
        let signature = self
            .hash
            .hmac(&credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(ScramError::WrongCredentials);
        }
        let client_key = xor(&proof, &signature);
        let proven = same_secret(&self.hash.hash(&client_key), &credential.stored_key);
        if !(proven && lookup.known) {
            return Err(ScramError::WrongCredentials);
        }
        let server_signature = self
            .hash
            .hmac(&credential.server_key, auth_message.as_bytes());
        Ok(ScramSuccess {
            user,
            server_final: format!("v={}", BASE64.encode(server_signature)).into_bytes(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// RFC 7677's example, byte for byte: user `user`, password `pencil`.
    #[test]
    fn rfc_7677_example_replays_on_both_sides() {
        let client_nonce = "rOprNGfwEbeRWgbNEkqO".to_owned();
        let server_nonce = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".to_owned();
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential =
            ScramCredential::from_password(ScramHash::Sha256, "pencil", &salt, 4096).unwrap();

        let mut client = ScramClient::new(ScramHash::Sha256, "user", "pencil", client_nonce);
        let mut server = ScramServer::new(ScramHash::Sha256, server_nonce);
        let first = client.client_first();
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = server
            .server_first(&first, |name| {
                assert_eq!(name, "user");
                Lookup {
                    credential: credential.clone(),
                    known: true,
                }
            })
            .unwrap();
        assert_eq!(
            String::from_utf8(server_first.clone()).unwrap(),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let client_final = client.client_final(&server_first).unwrap();
        assert_eq!(
            String::from_utf8(client_final.clone()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let success = server.server_final(&client_final).unwrap();
        assert_eq!(success.user, "user");
        assert_eq!(
            String::from_utf8(success.server_final.clone()).unwrap(),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        client.verify(&success.server_final).unwrap();
    }

    fn exchange(
        hash: ScramHash,
        user: &str,
        password: &str,
        credential: &ScramCredential,
        known: bool,
    ) -> Result<ScramSuccess, ScramError> {
        let mut client = ScramClient::new(hash, user, password, nonce(b"client-random"));
        let mut server = ScramServer::new(hash, nonce(b"server-random"));
        let server_first = server.server_first(&client.client_first(), |_| Lookup {
            credential: credential.clone(),
            known,
        })?;
        let client_final = client.client_final(&server_first)?;
        let success = server.server_final(&client_final)?;
        client.verify(&success.server_final)?;
        Ok(success)
    }

    #[test]
    fn the_right_password_passes_and_a_wrong_one_or_unknown_user_does_not() {
        for hash in ScramHash::ALL {
            let credential =
                ScramCredential::from_password(hash, "s3cret", b"0123456789abcdef", 4096).unwrap();
            let ok = exchange(hash, "a,b=c", "s3cret", &credential, true).unwrap();
            assert_eq!(ok.user, "a,b=c", "{hash:?}: names are escaped and back");
            assert_eq!(
                exchange(hash, "alice", "wrong", &credential, true),
                Err(ScramError::WrongCredentials)
            );
            // A decoy credential with the right password still fails.
            assert_eq!(
                exchange(hash, "nobody", "s3cret", &credential, false),
                Err(ScramError::WrongCredentials)
            );
        }
    }

    #[test]
    fn a_server_without_the_credential_is_caught_by_the_client() {
        let hash = ScramHash::Sha256;
        let real = ScramCredential::from_password(hash, "s3cret", b"salt-salt", 4096).unwrap();
        let mut client = ScramClient::new(hash, "alice", "s3cret", nonce(b"c"));
        let mut server = ScramServer::new(hash, nonce(b"s"));
        let server_first = server
            .server_first(&client.client_first(), |_| Lookup {
                credential: real.clone(),
                known: true,
            })
            .unwrap();
        client.client_final(&server_first).unwrap();
        // An impostor answers with a signature made from another key.
        let forged = format!("v={}", BASE64.encode([7u8; 32]));
        assert_eq!(
            client.verify(forged.as_bytes()),
            Err(ScramError::ServerSignature)
        );
    }

    #[test]
    fn a_credential_prints_and_parses_back() {
        let credential =
            ScramCredential::from_password(ScramHash::Sha512, "pw", b"some salt", 4096).unwrap();
        let text = credential.to_string();
        assert!(text.starts_with("SCRAM-SHA-512$4096:"), "{text}");
        assert_eq!(ScramCredential::parse(&text).unwrap(), credential);
        for bad in [
            "SCRAM-SHA-1$4096:c2FsdA==$AAAA:AAAA",
            "SCRAM-SHA-256$10:c2FsdA==$AAAA:AAAA",
            "SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA",
            "SCRAM-SHA-256$4096:c2FsdA==",
            "nonsense",
        ] {
            assert!(ScramCredential::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_messages_are_errors_not_panics() {
        let credential =
            ScramCredential::from_password(ScramHash::Sha256, "pw", b"salt", 4096).unwrap();
        let lookup = |_: &str| Lookup {
            credential: credential.clone(),
            known: true,
        };
        for first in [
            &b""[..],
            b"n,,",
            b"n,,n=",
            b"x,,n=a,r=b",
            b"p=tls-unique,,n=a,r=b",
            b"n,,n=a=2,r=b",
            b"n,,n=a,r=",
            &[0xff, 0xfe][..],
        ] {
            let mut server = ScramServer::new(ScramHash::Sha256, nonce(b"s"));
            assert!(server.server_first(first, lookup).is_err(), "{first:?}");
        }
        let mut server = ScramServer::new(ScramHash::Sha256, nonce(b"s"));
        assert_eq!(
            server.server_final(b"c=biws,r=x,p=AAAA"),
            Err(ScramError::OutOfOrder)
        );
        let mut server = ScramServer::new(ScramHash::Sha256, nonce(b"s"));
        server.server_first(b"n,,n=a,r=abc", lookup).unwrap();
        assert_eq!(
            server.server_final(b"c=biws,r=abc-not-it,p=AAAA"),
            Err(ScramError::NonceMismatch)
        );
        let mut client = ScramClient::new(ScramHash::Sha256, "a", "pw", nonce(b"c"));
        assert!(client.client_final(b"r=other,s=c2FsdA==,i=4096").is_err());
        assert_eq!(
            client.client_final(format!("r={}x,s=c2FsdA==,i=99", nonce(b"c")).as_bytes()),
            Err(ScramError::Iterations(99))
        );
    }
}
