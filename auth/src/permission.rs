//! Who may do what: a principal's role, and for a plain user its grants,
//! each a set of operations on the topics a pattern names.

use std::fmt;

/// Something a request does to a topic (or, for the cluster's own
/// operations, to its segments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Operation {
    /// Append records (and upload payloads) to the topic.
    Produce = 1 << 0,
    /// Read records (and payloads) from the topic.
    Consume = 1 << 1,
    /// See the topic: describe it, list it, read its layout.
    Describe = 1 << 2,
    /// Create the topic.
    Create = 1 << 3,
    /// Delete the topic.
    Delete = 1 << 4,
    /// Split one of its segments.
    Split = 1 << 5,
    /// Merge two of its segments.
    Merge = 1 << 6,
    /// Move one of its segments to another broker or shard.
    Move = 1 << 7,
    /// Set its scaling policy.
    Policy = 1 << 8,
}

impl Operation {
    /// Every operation, in the order the auth file lists them.
    pub const ALL: [Operation; 9] = [
        Operation::Produce,
        Operation::Consume,
        Operation::Describe,
        Operation::Create,
        Operation::Delete,
        Operation::Split,
        Operation::Merge,
        Operation::Move,
        Operation::Policy,
    ];

    /// The operation's name in the auth file.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Produce => "produce",
            Operation::Consume => "consume",
            Operation::Describe => "describe",
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::Split => "split",
            Operation::Merge => "merge",
            Operation::Move => "move",
            Operation::Policy => "policy",
        }
    }

    pub fn from_name(name: &str) -> Option<Operation> {
        Operation::ALL.into_iter().find(|o| o.name() == name)
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of operations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Operations(u16);

impl Operations {
    /// Every operation on a topic: the auth file's `admin`.
    pub const ALL: Operations = Operations(0x1ff);

    pub fn with(self, op: Operation) -> Operations {
        Operations(self.0 | op as u16)
    }

    pub fn contains(self, op: Operation) -> bool {
        self.0 & op as u16 != 0
    }
}

/// Which topics a grant covers: `*` (all), `PREFIX*` (every topic whose
/// `NAMESPACE/NAME` starts with the prefix), or one topic's exact name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicPattern {
    All,
    Prefix(String),
    Exact(String),
}

impl TopicPattern {
    pub fn parse(text: &str) -> TopicPattern {
        match text.strip_suffix('*') {
            Some("") => TopicPattern::All,
            Some(prefix) => TopicPattern::Prefix(prefix.to_owned()),
            None => TopicPattern::Exact(text.to_owned()),
        }
    }

    pub fn matches(&self, topic: &str) -> bool {
        match self {
            TopicPattern::All => true,
            TopicPattern::Prefix(p) => topic.starts_with(p.as_str()),
            TopicPattern::Exact(t) => topic == t,
        }
    }
}

/// Operations on the topics a pattern names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub topics: TopicPattern,
    pub operations: Operations,
}

/// What a principal is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Anything any client may do, on every topic.
    Admin,
    /// The cluster's own processes (the control plane and the brokers,
    /// proven by the cluster secret): everything, and the cluster's
    /// internal requests (membership, load, layout commands), which no
    /// user may send.
    Cluster,
    /// What the grants allow, and nothing else.
    User(Vec<Grant>),
}

/// An authenticated party.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// The most bytes a second its produce requests may bring to one
    /// shard (records and payload uploads); `None`: no limit.
    pub produce_bytes_per_s: Option<u64>,
}

impl Principal {
    /// Whether this principal may do `op` to `topic` (`NAMESPACE/NAME`).
    pub fn may(&self, op: Operation, topic: &str) -> bool {
        match &self.role {
            Role::Admin | Role::Cluster => true,
            Role::User(grants) => grants
                .iter()
                .any(|g| g.operations.contains(op) && g.topics.matches(topic)),
        }
    }

    /// Whether this principal is the cluster itself.
    pub fn is_cluster(&self) -> bool {
        self.role == Role::Cluster
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_cover_their_patterns_and_operations_only() {
        let bob = Principal {
            name: "bob".into(),
            produce_bytes_per_s: None,
            role: Role::User(vec![
                Grant {
                    topics: TopicPattern::parse("orders/*"),
                    operations: Operations::default()
                        .with(Operation::Produce)
                        .with(Operation::Consume),
                },
                Grant {
                    topics: TopicPattern::parse("*"),
                    operations: Operations::default().with(Operation::Describe),
                },
                Grant {
                    topics: TopicPattern::parse("logs/app"),
                    operations: Operations::ALL,
                },
            ]),
        };
        assert!(bob.may(Operation::Produce, "orders/eu"));
        assert!(bob.may(Operation::Consume, "orders/us"));
        assert!(!bob.may(Operation::Delete, "orders/eu"));
        assert!(!bob.may(Operation::Produce, "ordersx/eu"));
        assert!(bob.may(Operation::Describe, "anything/at-all"));
        assert!(bob.may(Operation::Split, "logs/app"));
        assert!(!bob.may(Operation::Split, "logs/app2"));
        for op in Operation::ALL {
            assert_eq!(Operation::from_name(op.name()), Some(op));
            assert!(Operations::ALL.contains(op));
        }
        let admin = Principal {
            name: "alice".into(),
            produce_bytes_per_s: None,
            role: Role::Admin,
        };
        assert!(admin.may(Operation::Delete, "x/y") && !admin.is_cluster());
    }
}
