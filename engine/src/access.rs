//! Who a connection is, on a broker port: the authentication step
//! answered, and every other request judged by what it needs
//! (`auth::request_access`) before it is handled. A broker without an
//! auth file lets every connection do anything.

use auth::{Denied, Session, Step};

use crate::request::response_frame;
use crate::shard::Shard;

/// A connection's standing, fresh.
pub(crate) fn new_session(shard: &Shard) -> Session {
    Session::new(shard.config.auth.as_deref())
}

/// Answer one authentication step.
pub(crate) fn authenticate(
    shard: &Shard,
    id: u32,
    session: &mut Session,
    mechanism: &str,
    message: &str,
) -> Vec<u8> {
    let auth = shard.config.auth.as_deref();
    let step = session.authenticate(
        auth,
        mechanism,
        message.as_bytes(),
        auth::session::server_nonce,
    );
    match step {
        Ok(step) => {
            if let (Step::Done(_), Some(p)) = (&step, session.principal()) {
                log::debug!(
                    "shard {}: a connection authenticated as {:?}",
                    shard.index,
                    p.name
                );
            }
            response_frame(id, &auth::request_access::step_answer(step))
        }
        Err(denied) => {
            log::info!("shard {}: authentication refused: {denied}", shard.index);
            denied_frame(shard, id, &denied)
        }
    }
}

/// Hold a produce of `bytes` back as long as its user's byte-rate quota
/// needs (`produce_quota`); at once for a user without one.
pub(crate) async fn hold_to_quota(shard: &Shard, session: &Session, bytes: usize) {
    let Some(principal) = session.principal() else {
        return;
    };
    let Some(rate) = principal.produce_bytes_per_s else {
        return;
    };
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    let wait = shard
        .quotas
        .charge(&principal.name, rate, bytes, std::time::Instant::now());
    if wait.is_zero() {
        return;
    }
    shard.metrics.throttled.add(1);
    shard
        .metrics
        .throttled_ms
        .add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
    glommio::timer::sleep(wait).await;
}

/// The error answer to a refused request, counted.
pub(crate) fn denied_frame(shard: &Shard, id: u32, denied: &Denied) -> Vec<u8> {
    shard.metrics.denied(denied.reason()).add(1);
    response_frame(id, &auth::request_access::refusal(denied))
}
