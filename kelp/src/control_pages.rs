//! What `kelp control --http` serves: the control plane's metrics page
//! and its readiness (docs/operations.md).

use std::sync::Arc;

use control::control_figures::ControlFigures;
use engine::admin_http::AdminPages;
use engine::metrics_page::{render, Family, Value};

#[derive(Debug)]
pub struct ControlPages {
    pub figures: Arc<ControlFigures>,
}

fn one(mut family: Family, value: Value) -> Family {
    family.sample(Vec::new(), value);
    family
}

impl AdminPages for ControlPages {
    fn metrics_page(&self) -> String {
        let f = self.figures.read();
        let mut segments = Family::gauge(
            "kelp_control_segments",
            "Segments in the topics' layouts, by state (0 on an instance that does not lead).",
        );
        segments.sample(
            vec![("state", "open".into())],
            Value::level(f.segments_open),
        );
        segments.sample(
            vec![("state", "sealed".into())],
            Value::level(f.segments_sealed),
        );
        let mut actions = Family::counter(
            "kelp_control_actions",
            "Layout changes this instance decided while it led, by kind.",
        );
        let a = f.actions;
        for (kind, n) in [
            ("create_topic", a.topics_created),
            ("delete_topic", a.topics_deleted),
            ("split", a.splits),
            ("merge", a.merges),
            ("move", a.moves),
            ("followers", a.follower_changes),
        ] {
            actions.sample(vec![("action", kind.into())], Value::Counter(n));
        }
        let mut refused = Family::counter(
            "kelp_control_connections_refused",
            "Connections the control plane turned away, by reason.",
        );
        refused.sample(
            vec![("reason", "connection_limit".into())],
            Value::Counter(f.refused_for_connections),
        );
        refused.sample(
            vec![("reason", "address_limit".into())],
            Value::Counter(f.refused_for_address),
        );
        let mut denied = Family::counter(
            "kelp_control_requests_denied",
            "Requests the control plane refused for who sent them (--auth), by reason.",
        );
        for (reason, n) in [
            ("unauthenticated", f.denied_unauthenticated),
            ("authentication_failed", f.denied_authentication_failed),
            ("forbidden", f.denied_forbidden),
        ] {
            denied.sample(vec![("reason", reason.into())], Value::Counter(n));
        }
        render(vec![
            one(
                Family::gauge(
                    "kelp_control_leader",
                    "1 while this instance leads the cluster (one alone always does), else 0.",
                ),
                Value::level(u64::from(f.leader)),
            ),
            one(
                Family::gauge(
                    "kelp_control_brokers",
                    "Live brokers (0 on an instance that does not lead).",
                ),
                Value::level(f.brokers),
            ),
            one(
                Family::gauge(
                    "kelp_control_topics",
                    "Topics (0 on an instance that does not lead).",
                ),
                Value::level(f.topics),
            ),
            segments,
            actions,
            one(
                Family::gauge("kelp_control_connections", "Connections open."),
                Value::level(f.connections),
            ),
            refused,
            denied,
            one(
                Family::counter(
                    "kelp_control_stalled_ms",
                    "Milliseconds the control plane's driver was held up (a hung filer or state \
                     store), in stretches over 250 ms; not counted as brokers' silence.",
                ),
                Value::Counter(f.stalled_ms),
            ),
            one(
                Family::gauge(
                    "kelp_control_receive_bytes",
                    "Request bytes held against the receive budget (--receive-bytes-max).",
                ),
                Value::level(f.receive_bytes),
            ),
        ])
    }

    /// Ready while it leads: the leader is the instance that serves; the
    /// others only point brokers and clients at it.
    fn readiness(&self) -> Result<(), String> {
        if self.figures.read().leader {
            Ok(())
        } else {
            Err("not the leader (yet): requests are answered with the leader's address".into())
        }
    }
}
