//! The SCRAM parsers over arbitrary bytes from a peer: the server's reading
//! of a client's first and final messages, and the client's reading of a
//! server's first and final ones. The first byte picks the side; no input
//! may panic, and none may authenticate without the password.
#![no_main]

use kelp_auth::scram::{nonce, Lookup, ScramClient, ScramCredential, ScramHash, ScramServer};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// The server's credential of each hash, made once (PBKDF2 is slow by
/// design).
fn credential(hash: ScramHash) -> &'static ScramCredential {
    static MADE: OnceLock<[ScramCredential; 2]> = OnceLock::new();
    let made = MADE.get_or_init(|| {
        ScramHash::ALL.map(|h| {
            ScramCredential::from_password(h, "the password", b"fuzz salt", 4096)
                .expect("a valid credential")
        })
    });
    &made[usize::from(hash == ScramHash::Sha512)]
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let hash = if pick & 1 == 0 { ScramHash::Sha256 } else { ScramHash::Sha512 };
    let credential = credential(hash);
    // Split the rest in two messages at the first NUL.
    let (first, last) = match rest.iter().position(|b| *b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    if pick & 2 == 0 {
        let mut server = ScramServer::new(hash, nonce(b"server"));
        let lookup = |_: &str| Lookup {
            credential: credential.clone(),
            known: true,
        };
        if server.server_first(first, lookup).is_ok() {
            // Without the password, no proof passes.
            assert!(server.server_final(last).is_err());
        }
    } else {
        let mut client = ScramClient::new(hash, "user", "the password", nonce(b"client"));
        if client.client_final(first).is_ok() {
            let _ = client.verify(last);
        }
    }
});
