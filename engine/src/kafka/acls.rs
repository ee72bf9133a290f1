//! DescribeAcls: the auth file's grants, shown as the Kafka ACL bindings
//! they amount to. kelp's permissions live in the auth file (edited, then
//! the broker restarted), so CreateAcls and DeleteAcls are not served; a
//! Kafka tool can still read what each user may do.
//!
//! Each user of the file becomes `User:NAME`, host `*`, ALLOW:
//!
//! - an admin: ALL on TOPIC `*` (LITERAL) and on CLUSTER `kafka-cluster`;
//! - a grant on `*`, or on `PREFIX*` whose prefix covers `kafka/`: TOPIC
//!   `*` (LITERAL); on `kafka/PREFIX*`: TOPIC `PREFIX` (PREFIXED); on
//!   `kafka/NAME`: TOPIC `NAME` (LITERAL); grants on other namespaces'
//!   topics are no Kafka topic's and are left out. Its operations:
//!   produce is WRITE, consume READ, describe DESCRIBE, create CREATE,
//!   delete DELETE, and move, split, merge and policy are ALTER;
//! - every user: READ on GROUP `*` (any user may use any group).
//!
//! The cluster's own principal is not shown. Only an admin may describe
//! them (Kafka asks DESCRIBE on the cluster); a gateway without an auth
//! file answers SECURITY_DISABLED, as Kafka without an authorizer.

use auth::permission::{Role, TopicPattern};
use auth::{AuthFile, Operation, Principal};
use kafka::api::describe_acls::{
    AclDescription, DescribeAclsRequest, DescribeAclsResource, DescribeAclsResponse,
};
use kafka::error_code;

use super::topic_access::Access;
use super::topics::KAFKA_NAMESPACE;

const RESOURCE_ANY: i8 = 1;
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_GROUP: i8 = 3;
const RESOURCE_CLUSTER: i8 = 4;
const PATTERN_ANY: i8 = 1;
const PATTERN_MATCH: i8 = 2;
const PATTERN_LITERAL: i8 = 3;
const PATTERN_PREFIXED: i8 = 4;
const OPERATION_ANY: i8 = 1;
const OPERATION_ALL: i8 = 2;
const OPERATION_READ: i8 = 3;
const OPERATION_WRITE: i8 = 4;
const OPERATION_CREATE: i8 = 5;
const OPERATION_DELETE: i8 = 6;
const OPERATION_ALTER: i8 = 7;
const OPERATION_DESCRIBE: i8 = 8;
const PERMISSION_ANY: i8 = 1;
const PERMISSION_ALLOW: i8 = 3;
/// The name Kafka gives the cluster resource.
const CLUSTER_NAME: &str = "kafka-cluster";
const ANY_HOST: &str = "*";

/// One ACL binding.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Binding {
    resource_type: i8,
    resource_name: String,
    pattern_type: i8,
    principal: String,
    operation: i8,
}

/// Answer DescribeAcls for `access` from `auth`.
pub(crate) fn describe(
    auth: Option<&AuthFile>,
    access: &Access,
    request: &DescribeAclsRequest,
) -> DescribeAclsResponse {
    let Some(auth) = auth else {
        return refused(
            error_code::SECURITY_DISABLED,
            "no authorizer: the gateway runs without --auth",
        );
    };
    if !access.is_admin() {
        return refused(
            error_code::CLUSTER_AUTHORIZATION_FAILED,
            "only an admin may describe the ACLs",
        );
    }
    let mut names: Vec<&str> = auth.user_names().collect();
    names.sort_unstable();
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    for name in names {
        let Some(principal) = auth.principal(name) else {
            continue;
        };
        for b in bindings(&principal)
            .into_iter()
            .filter(|b| matches(request, b))
        {
            let acl = AclDescription {
                principal: b.principal,
                host: ANY_HOST.to_owned(),
                operation: b.operation,
                permission_type: PERMISSION_ALLOW,
            };
            match resources.iter_mut().find(|r| {
                (r.resource_type, r.resource_name.as_str(), r.pattern_type)
                    == (b.resource_type, b.resource_name.as_str(), b.pattern_type)
            }) {
                Some(r) => r.acls.push(acl),
                None => resources.push(DescribeAclsResource {
                    resource_type: b.resource_type,
                    resource_name: b.resource_name,
                    pattern_type: b.pattern_type,
                    acls: vec![acl],
                }),
            }
        }
    }
    DescribeAclsResponse {
        throttle_time_ms: 0,
        error_code: error_code::NONE,
        error_message: None,
        resources,
    }
}

fn refused(error_code: i16, message: &str) -> DescribeAclsResponse {
    DescribeAclsResponse {
        throttle_time_ms: 0,
        error_code,
        error_message: Some(message.to_owned()),
        resources: Vec::new(),
    }
}

/// What `principal` may do, as ACL bindings.
fn bindings(principal: &Principal) -> Vec<Binding> {
    let who = format!("User:{}", principal.name);
    let binding = |resource_type, resource_name: &str, pattern_type, operation| Binding {
        resource_type,
        resource_name: resource_name.to_owned(),
        pattern_type,
        principal: who.clone(),
        operation,
    };
    let mut out = Vec::new();
    match &principal.role {
        Role::Cluster => return out,
        Role::Admin => {
            out.push(binding(RESOURCE_TOPIC, "*", PATTERN_LITERAL, OPERATION_ALL));
            out.push(binding(
                RESOURCE_CLUSTER,
                CLUSTER_NAME,
                PATTERN_LITERAL,
                OPERATION_ALL,
            ));
        }
        Role::User(grants) => {
            let namespace = format!("{KAFKA_NAMESPACE}/");
            for grant in grants {
                let (name, pattern) = match &grant.topics {
                    TopicPattern::All => ("*".to_owned(), PATTERN_LITERAL),
                    TopicPattern::Prefix(p) if namespace.starts_with(p.as_str()) => {
                        ("*".to_owned(), PATTERN_LITERAL)
                    }
                    TopicPattern::Prefix(p) => match p.strip_prefix(&namespace) {
                        Some(rest) => (rest.to_owned(), PATTERN_PREFIXED),
                        None => continue,
                    },
                    TopicPattern::Exact(t) => match t.strip_prefix(&namespace) {
                        Some(rest) => (rest.to_owned(), PATTERN_LITERAL),
                        None => continue,
                    },
                };
                let mut operations: Vec<i8> = Operation::ALL
                    .iter()
                    .filter(|op| grant.operations.contains(**op))
                    .map(|op| kafka_operation(*op))
                    .collect();
                operations.sort_unstable();
                operations.dedup();
                for operation in operations {
                    out.push(binding(RESOURCE_TOPIC, &name, pattern, operation));
                }
            }
        }
    }
    out.push(binding(
        RESOURCE_GROUP,
        "*",
        PATTERN_LITERAL,
        OPERATION_READ,
    ));
    out
}

/// The Kafka operation a kelp operation on a topic is.
fn kafka_operation(op: Operation) -> i8 {
    match op {
        Operation::Produce => OPERATION_WRITE,
        Operation::Consume => OPERATION_READ,
        Operation::Describe => OPERATION_DESCRIBE,
        Operation::Create => OPERATION_CREATE,
        Operation::Delete => OPERATION_DELETE,
        Operation::Split | Operation::Merge | Operation::Move | Operation::Policy => {
            OPERATION_ALTER
        }
    }
}

/// Whether `b` passes the request's filter (Kafka's AclBindingFilter).
fn matches(filter: &DescribeAclsRequest, b: &Binding) -> bool {
    let resource_type = matches!(filter.resource_type_filter, RESOURCE_ANY)
        || filter.resource_type_filter == b.resource_type;
    let name = match (&filter.resource_name_filter, filter.pattern_type_filter) {
        (None, _) => true,
        // MATCH: every binding that applies to the named resource.
        (Some(n), PATTERN_MATCH) => match b.pattern_type {
            PATTERN_PREFIXED => n.starts_with(b.resource_name.as_str()),
            _ => b.resource_name == *n || b.resource_name == "*",
        },
        (Some(n), _) => b.resource_name == *n,
    };
    let pattern = matches!(filter.pattern_type_filter, PATTERN_ANY | PATTERN_MATCH)
        || filter.pattern_type_filter == b.pattern_type;
    let principal = filter
        .principal_filter
        .as_ref()
        .is_none_or(|p| *p == b.principal);
    let host = filter.host_filter.as_ref().is_none_or(|h| h == ANY_HOST);
    let operation = filter.operation == OPERATION_ANY || filter.operation == b.operation;
    let permission =
        filter.permission_type == PERMISSION_ANY || filter.permission_type == PERMISSION_ALLOW;
    resource_type && name && pattern && principal && host && operation && permission
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    fn file() -> AuthFile {
        let text = "[[user]]\nname = \"alice\"\npassword = \"a\"\nrole = \"admin\"\n\
             [[user]]\nname = \"bob\"\npassword = \"b\"\n\
             [[user.grant]]\ntopics = \"kafka/orders*\"\nallow = [\"produce\", \"describe\"]\n\
             [[user.grant]]\ntopics = \"kafka/audit\"\nallow = [\"consume\", \"move\", \"split\"]\n\
             [[user.grant]]\ntopics = \"native/*\"\nallow = [\"admin\"]\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        std::fs::write(&path, text).unwrap();
        AuthFile::load(&path).unwrap()
    }

    fn any() -> DescribeAclsRequest {
        DescribeAclsRequest {
            resource_type_filter: RESOURCE_ANY,
            resource_name_filter: None,
            pattern_type_filter: PATTERN_ANY,
            principal_filter: None,
            host_filter: None,
            operation: OPERATION_ANY,
            permission_type: PERMISSION_ANY,
        }
    }

    fn admin(auth: &AuthFile) -> Access {
        Access::Principal(auth.principal("alice").unwrap())
    }

    fn flat(response: &DescribeAclsResponse) -> Vec<(i8, String, i8, String, i8)> {
        let mut out = Vec::new();
        for r in &response.resources {
            for a in &r.acls {
                out.push((
                    r.resource_type,
                    r.resource_name.clone(),
                    r.pattern_type,
                    a.principal.clone(),
                    a.operation,
                ));
            }
        }
        out
    }

    #[test]
    fn grants_become_the_bindings_they_amount_to() {
        let auth = file();
        let got = flat(&describe(Some(&auth), &admin(&auth), &any()));
        let want = vec![
            (2, "*".to_owned(), 3, "User:alice".to_owned(), OPERATION_ALL),
            (
                4,
                "kafka-cluster".to_owned(),
                3,
                "User:alice".to_owned(),
                OPERATION_ALL,
            ),
            (
                3,
                "*".to_owned(),
                3,
                "User:alice".to_owned(),
                OPERATION_READ,
            ),
            (3, "*".to_owned(), 3, "User:bob".to_owned(), OPERATION_READ),
            (
                2,
                "orders".to_owned(),
                4,
                "User:bob".to_owned(),
                OPERATION_WRITE,
            ),
            (
                2,
                "orders".to_owned(),
                4,
                "User:bob".to_owned(),
                OPERATION_DESCRIBE,
            ),
            (
                2,
                "audit".to_owned(),
                3,
                "User:bob".to_owned(),
                OPERATION_READ,
            ),
            (
                2,
                "audit".to_owned(),
                3,
                "User:bob".to_owned(),
                OPERATION_ALTER,
            ),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn filters_narrow_the_bindings_as_kafka_filters_do() {
        let auth = file();
        let who = admin(&auth);
        let bob_writes = DescribeAclsRequest {
            principal_filter: Some("User:bob".to_owned()),
            operation: OPERATION_WRITE,
            ..any()
        };
        let got = flat(&describe(Some(&auth), &who, &bob_writes));
        assert_eq!(
            got,
            vec![(
                2,
                "orders".to_owned(),
                4,
                "User:bob".to_owned(),
                OPERATION_WRITE
            )]
        );
        // MATCH on a topic name: the literal, wildcard and prefixed
        // bindings that apply to it.
        let on_orders_eu = DescribeAclsRequest {
            resource_type_filter: RESOURCE_TOPIC,
            resource_name_filter: Some("orders-eu".to_owned()),
            pattern_type_filter: PATTERN_MATCH,
            ..any()
        };
        let got = flat(&describe(Some(&auth), &who, &on_orders_eu));
        let names: Vec<(&str, &str)> = got
            .iter()
            .map(|(_, n, _, p, _)| (n.as_str(), p.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("*", "User:alice"),
                ("orders", "User:bob"),
                ("orders", "User:bob")
            ]
        );
        let literal_only = DescribeAclsRequest {
            resource_name_filter: Some("orders".to_owned()),
            pattern_type_filter: PATTERN_LITERAL,
            ..any()
        };
        assert!(describe(Some(&auth), &who, &literal_only)
            .resources
            .is_empty());
    }

    #[test]
    fn only_an_admin_may_describe_and_only_with_an_auth_file() {
        let auth = file();
        let bob = Access::Principal(Arc::clone(&auth.principal("bob").unwrap()));
        let refused = describe(Some(&auth), &bob, &any());
        assert_eq!(refused.error_code, error_code::CLUSTER_AUTHORIZATION_FAILED);
        assert!(refused.resources.is_empty());
        let open = describe(None, &Access::Everything, &any());
        assert_eq!(open.error_code, error_code::SECURITY_DISABLED);
    }
}
