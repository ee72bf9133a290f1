//! What each request of kelp's protocol needs of its connection: the one
//! table both ports judge requests by (the broker's and the control
//! plane's), so an operation is allowed or refused the same wherever it
//! is sent.

use wire::message::{AuthRequest, MembershipRequest};
use wire::{AdminRequest, BrokerPortRequest, ControlPortRequest, DataRequest, ErrorCode, Response};

use crate::permission::Operation;
use crate::session::{Denied, Session, Step};

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need<'a> {
    /// Nothing: it is the authentication itself.
    Nothing,
    /// An authenticated connection, of any principal.
    Authenticated,
    /// `Operation` on the topic.
    Topic(Operation, &'a str),
    /// The cluster's own principal.
    Cluster,
}

/// What an admin request needs.
pub fn admin_need(request: &AdminRequest) -> Need<'_> {
    match request {
        AdminRequest::ListTopics | AdminRequest::ListBrokers => Need::Authenticated,
        AdminRequest::CreateTopic { topic, .. } => Need::Topic(Operation::Create, topic),
        AdminRequest::DeleteTopic { topic } => Need::Topic(Operation::Delete, topic),
        AdminRequest::DescribeTopic { topic } => Need::Topic(Operation::Describe, topic),
        AdminRequest::SplitSegment { topic, .. } => Need::Topic(Operation::Split, topic),
        AdminRequest::MergeSegments { topic, .. } => Need::Topic(Operation::Merge, topic),
        AdminRequest::MoveSegment { topic, .. } => Need::Topic(Operation::Move, topic),
        AdminRequest::SetPolicy { topic, .. } => Need::Topic(Operation::Policy, topic),
    }
}

/// What a data request needs.
pub fn data_need<'a>(request: &'a DataRequest<'_>) -> Need<'a> {
    match request {
        DataRequest::Shards | DataRequest::InitProducer => Need::Authenticated,
        DataRequest::HeldLayout { topic } => Need::Topic(Operation::Describe, topic),
        DataRequest::Produce { topic, .. } => Need::Topic(Operation::Produce, topic),
        // A follower's fetch moves the owner's view of its copy: the
        // cluster's own.
        DataRequest::Fetch(f) if f.follower.is_some() => Need::Cluster,
        DataRequest::Fetch(f) => Need::Topic(Operation::Consume, &f.topic),
        DataRequest::PayloadWrite { topic, .. } | DataRequest::PayloadCommit { topic, .. } => {
            Need::Topic(Operation::Produce, topic)
        }
        DataRequest::PayloadRead { topic, .. } => Need::Topic(Operation::Consume, topic),
    }
}

/// What a request on a broker's port needs.
pub fn broker_port_need<'a>(request: &'a BrokerPortRequest<'_>) -> Need<'a> {
    match request {
        BrokerPortRequest::Auth(AuthRequest::Authenticate { .. }) => Need::Nothing,
        BrokerPortRequest::Data(r) => data_need(r),
        BrokerPortRequest::Admin(r) => admin_need(r),
        BrokerPortRequest::Command(_) => Need::Cluster,
    }
}

/// What a request on the control plane's port needs.
pub fn control_port_need(request: &ControlPortRequest) -> Need<'_> {
    match request {
        ControlPortRequest::Auth(AuthRequest::Authenticate { .. }) => Need::Nothing,
        ControlPortRequest::Admin(r) => admin_need(r),
        ControlPortRequest::Membership(
            MembershipRequest::RegisterBroker { .. }
            | MembershipRequest::LoadReport { .. }
            | MembershipRequest::LeaveBroker { .. },
        ) => Need::Cluster,
    }
}

/// The answer to an authentication step that was taken.
pub fn step_answer(step: Step) -> Response<'static> {
    let (done, message) = match step {
        Step::Challenge(m) => (false, m),
        Step::Done(m) => (true, m),
    };
    Response::Authenticated {
        done,
        message: String::from_utf8_lossy(&message).into_owned(),
    }
}

/// The answer to a request refused for who sent it: `Unauthenticated`
/// for who the client is, `Forbidden` for what it may do.
pub fn refusal(denied: &Denied) -> Response<'static> {
    let code = if denied.is_authentication() {
        ErrorCode::Unauthenticated
    } else {
        ErrorCode::Forbidden
    };
    Response::Error {
        code,
        message: denied.to_string(),
    }
}

impl Session {
    /// Whether this connection may send a request that needs `need`.
    pub fn permit(&self, need: Need<'_>) -> Result<(), Denied> {
        match need {
            Need::Nothing => Ok(()),
            Need::Authenticated => self.check_authenticated(),
            Need::Topic(op, topic) => self.check(op, topic),
            Need::Cluster => self.check_cluster(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::message::samples;

    /// Every sample request of either port has a need, and only the
    /// authentication step needs nothing.
    #[test]
    fn every_request_needs_something_but_authentication() {
        for r in samples::data_requests() {
            assert_ne!(data_need(&r), Need::Nothing, "{r:?}");
        }
        for r in samples::admin_requests() {
            assert_ne!(admin_need(&r), Need::Nothing, "{r:?}");
        }
        for r in samples::membership_requests() {
            assert_eq!(
                control_port_need(&ControlPortRequest::Membership(r)),
                Need::Cluster
            );
        }
        for r in samples::layout_commands() {
            assert_eq!(
                broker_port_need(&BrokerPortRequest::Command(r)),
                Need::Cluster
            );
        }
        for r in samples::auth_requests() {
            assert_eq!(
                broker_port_need(&BrokerPortRequest::Auth(r.clone())),
                Need::Nothing
            );
            assert_eq!(
                control_port_need(&ControlPortRequest::Auth(r)),
                Need::Nothing
            );
        }
    }
}
