//! The tables admin commands print: a topic's segments (`topic
//! describe`, and the layout after a split, merge, move or policy change)
//! and a cluster's brokers (`cluster`). One row per line, columns padded
//! with spaces, `-` where there is nothing to show; times are UTC.

use client::{BrokerStatus, SegmentInfo, TopicInfo};
use serde_json::{json, Value};

/// Which columns the segments table shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Columns {
    /// The ones an operator reads first, about 130 characters wide.
    Narrow,
    /// Every one: also the epoch, appended bytes, the first write and the
    /// seal time.
    Wide,
}

/// Text columns padded to their widest cell: numbers right-aligned, text
/// left-aligned; no trailing spaces.
struct Table {
    headers: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// Spaces between two columns.
const COLUMN_GAP: usize = 2;

impl Table {
    fn new(headers: Vec<(&'static str, Align)>) -> Table {
        Table {
            headers,
            rows: Vec::new(),
        }
    }

    fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.headers.len());
        self.rows.push(row);
    }

    fn render(&self) -> String {
        let widths: Vec<usize> = self
            .headers
            .iter()
            .enumerate()
            .map(|(i, (h, _))| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([h.len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|(h, _)| (*h).to_owned()).collect();
        for cells in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i > 0 {
                    line.push_str(&" ".repeat(COLUMN_GAP));
                }
                let pad = " ".repeat(widths[i].saturating_sub(cell.chars().count()));
                match self.headers[i].1 {
                    Align::Left => {
                        line.push_str(cell);
                        line.push_str(&pad);
                    }
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(cell);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A topic's segments by range start then id, so a parent sits above the
/// pieces of its range.
fn segments_in_order(info: &TopicInfo) -> Vec<&SegmentInfo> {
    let mut segments: Vec<&SegmentInfo> = info.segments.iter().collect();
    segments.sort_by_key(|s| (s.start, s.id));
    segments
}

/// The segments table: every segment the topic ever had (sealed ones
/// with their successors), by range start then id.
pub fn describe_table(info: &TopicInfo, columns: Columns) -> String {
    use Align::{Left, Right};
    let wide = columns == Columns::Wide;
    let mut headers = vec![("SEGMENT", Right)];
    if wide {
        headers.push(("EPOCH", Right));
    }
    headers.extend([
        ("RANGE", Left),
        ("STATE", Left),
        ("BROKER", Right),
        ("SHARD", Right),
        ("ADDRESS", Left),
        ("FOLLOWERS", Left),
        ("NEXT OFFSET", Right),
    ]);
    if wide {
        headers.push(("APPENDED BYTES", Right));
    }
    headers.extend([("BYTES/S", Right), ("RECORDS/S", Right), ("CREATED", Left)]);
    if wide {
        headers.extend([("FIRST WRITE", Right), ("SEALED", Left), ("LOST", Right)]);
    }
    headers.push(("SUCCESSORS", Left));
    let mut table = Table::new(headers);
    for s in segments_in_order(info) {
        let mut row = vec![s.id.to_string()];
        if wide {
            row.push(s.epoch.to_string());
        }
        row.extend([
            format!("{:08x}-{:08x}", s.start, s.end),
            state(s).to_owned(),
            s.broker.map_or_else(|| "-".to_owned(), |b| b.to_string()),
            s.shard.to_string(),
            s.address
                .as_ref()
                .map_or_else(|| "-".to_owned(), |a| a.tcp.clone()),
            followers(s),
            s.next_offset.to_string(),
        ]);
        if wide {
            row.push(s.appended_bytes.to_string());
        }
        row.extend([
            s.bytes_per_s.to_string(),
            s.records_per_s.to_string(),
            utc(Some(s.created_ms)),
        ]);
        if wide {
            // How long after its creation (for a successor: the split,
            // merge or move decision) the segment took its first record.
            row.push(s.first_append_ms.map_or_else(
                || "-".to_owned(),
                |t| format!("+{}ms", t.saturating_sub(s.created_ms)),
            ));
            row.push(utc(s.sealed_ms));
            row.push(s.lost_records.to_string());
        }
        row.push(if s.successors.is_empty() {
            "-".to_owned()
        } else {
            let ids: Vec<String> = s.successors.iter().map(u32::to_string).collect();
            ids.join(",")
        });
        table.push(row);
    }
    let mut out = format!("topic {}\n{}", info.name, table.render());
    // Lost records are never a column to overlook: each gets a line.
    for s in segments_in_order(info) {
        if s.lost_records > 0 {
            out.push_str(&format!(
                "segment {}: {} offsets lost: their records were found damaged on a broker's \
                 disk and could not be read back (the broker's log names the offsets; \
                 docs/broker.md)\n",
                s.id, s.lost_records
            ));
        }
    }
    out
}

/// A segment's followers as `broker/shard`, comma-separated, each not
/// in sync marked `(behind)`; `-` for none.
fn followers(s: &SegmentInfo) -> String {
    if s.followers.is_empty() {
        return "-".to_owned();
    }
    let each: Vec<String> = s
        .followers
        .iter()
        .map(|f| {
            let behind = if f.in_sync { "" } else { "(behind)" };
            format!("{}/{}{behind}", f.broker, f.shard)
        })
        .collect();
    each.join(",")
}

fn state(s: &SegmentInfo) -> &'static str {
    if s.sealed {
        "sealed"
    } else {
        "open"
    }
}

/// A topic as JSON: `{"name", "segments": [...]}`, every field of every
/// segment (docs/cli.md lists them); absent values are `null`.
pub fn topic_json(info: &TopicInfo) -> Value {
    let segments: Vec<Value> = segments_in_order(info)
        .into_iter()
        .map(|s| {
            json!({
                "id": s.id,
                "epoch": s.epoch,
                "range_start": s.start,
                "range_end": s.end,
                "state": state(s),
                "broker": s.broker,
                "shard": s.shard,
                "address": s.address.as_ref().map(|a| json!({"tcp": a.tcp, "quic": a.quic})),
                "next_offset": s.next_offset,
                "appended_bytes": s.appended_bytes,
                "bytes_per_s": s.bytes_per_s,
                "records_per_s": s.records_per_s,
                "created_ms": s.created_ms,
                "first_append_ms": s.first_append_ms,
                "sealed_ms": s.sealed_ms,
                "lost_records": s.lost_records,
                "successors": s.successors,
                "followers": s.followers.iter().map(|f| json!({
                    "broker": f.broker,
                    "shard": f.shard,
                    "in_sync": f.in_sync,
                    "address": f.address.as_ref().map(|a| json!({"tcp": a.tcp, "quic": a.quic})),
                })).collect::<Vec<Value>>(),
            })
        })
        .collect();
    json!({ "name": info.name, "segments": segments })
}

/// The brokers table: id, shard 0's TCP address, shard count, load,
/// utilization, open segments and when each was last heard from.
pub fn brokers_table(brokers: &[BrokerStatus]) -> String {
    use Align::{Left, Right};
    let mut table = Table::new(vec![
        ("BROKER", Right),
        ("ADDRESS", Left),
        ("SHARDS", Right),
        ("BYTES/S", Right),
        ("RECORDS/S", Right),
        ("UTIL", Right),
        ("OPEN SEGMENTS", Right),
        ("LAST HEARD", Left),
    ]);
    for b in brokers_in_order(brokers) {
        table.push(vec![
            b.id.to_string(),
            b.shards
                .first()
                .map_or_else(|| "-".to_owned(), |s| s.tcp.clone()),
            b.shards.len().to_string(),
            b.bytes_per_s.to_string(),
            b.records_per_s.to_string(),
            format!(
                "{}.{}%",
                b.utilization_permille / 10,
                b.utilization_permille % 10
            ),
            b.open_segments.to_string(),
            format!("{}.{}s ago", b.silent_ms / 1000, (b.silent_ms % 1000) / 100),
        ]);
    }
    table.render()
}

fn brokers_in_order(brokers: &[BrokerStatus]) -> Vec<&BrokerStatus> {
    let mut brokers: Vec<&BrokerStatus> = brokers.iter().collect();
    brokers.sort_by_key(|b| b.id);
    brokers
}

/// A cluster's brokers as JSON: an array, by id, every field.
pub fn brokers_json(brokers: &[BrokerStatus]) -> Value {
    let brokers: Vec<Value> = brokers_in_order(brokers)
        .into_iter()
        .map(|b| {
            let shards: Vec<Value> = b
                .shards
                .iter()
                .map(|a| json!({"tcp": a.tcp, "quic": a.quic}))
                .collect();
            json!({
                "id": b.id,
                "shards": shards,
                "capacity_bytes_per_s": b.capacity_bytes_per_s,
                "capacity_records_per_s": b.capacity_records_per_s,
                "bytes_per_s": b.bytes_per_s,
                "records_per_s": b.records_per_s,
                "utilization_permille": b.utilization_permille,
                "open_segments": b.open_segments,
                "silent_ms": b.silent_ms,
            })
        })
        .collect();
    Value::Array(brokers)
}

/// `ms` since the Unix epoch as RFC 3339 UTC to the second
/// (`2026-12-01T02:16:23Z`); `-` for none or 0 (a broker that does not
/// record it).
fn utc(ms: Option<u64>) -> String {
    let Some(ms) = ms.filter(|ms| *ms > 0) else {
        return "-".to_owned();
    };
    let secs = i64::try_from(ms / 1000).unwrap_or(i64::MAX);
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ms} ms"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use client::ShardAddress;

    #[test]
    fn describe_table_reads_well() {
        let info = TopicInfo {
            name: "ns/t".into(),
            segments: vec![
                SegmentInfo {
                    id: 2,
                    epoch: 1,
                    start: 0x8000_0000,
                    end: 1 << 32,
                    sealed: false,
                    shard: 1,
                    next_offset: 42,
                    appended_bytes: 4200,
                    successors: vec![],
                    broker: Some(3),
                    address: Some(ShardAddress {
                        tcp: "10.0.0.3:7421".into(),
                        quic: "10.0.0.3:7421".into(),
                    }),
                    bytes_per_s: 123_456,
                    records_per_s: 789,
                    created_ms: 1_764_555_383_000,
                    sealed_ms: None,
                    first_append_ms: Some(1_764_555_383_042),
                    lost_records: 0,
                    followers: vec![
                        client::FollowerInfo {
                            broker: 1,
                            shard: 0,
                            in_sync: true,
                            address: None,
                        },
                        client::FollowerInfo {
                            broker: 4,
                            shard: 1,
                            in_sync: false,
                            address: None,
                        },
                    ],
                },
                SegmentInfo {
                    id: 1,
                    epoch: 1,
                    start: 0,
                    end: 0x8000_0000,
                    sealed: true,
                    shard: 0,
                    next_offset: 7,
                    appended_bytes: 700,
                    successors: vec![3, 4],
                    lost_records: 3,
                    ..SegmentInfo::default()
                },
            ],
        };
        let table = describe_table(&info, Columns::Wide);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "topic ns/t");
        assert!(lines[1].starts_with("SEGMENT"));
        for column in [
            "BROKER",
            "ADDRESS",
            "BYTES/S",
            "RECORDS/S",
            "CREATED",
            "FIRST WRITE",
            "SEALED",
        ] {
            assert!(lines[1].contains(column), "{table}");
        }
        assert!(lines[2].contains("00000000-80000000"), "{table}");
        assert!(lines[2].contains("sealed") && lines[2].ends_with("3,4"));
        assert!(lines[3].contains("80000000-100000000"), "{table}");
        assert!(lines[3].contains("open") && lines[3].contains("42"));
        assert!(
            lines[3].contains("4200") && lines[2].contains("700"),
            "{table}"
        );
        assert!(lines[3].contains("10.0.0.3:7421") && lines[3].contains("123456"));
        assert!(lines[3].contains("2025-12-01T02:16:23Z"), "{table}");
        assert!(lines[3].contains("+42ms"), "{table}");
        assert!(lines[3].contains("1/0,4/1(behind)"), "{table}");
        assert!(lines[1].contains("FOLLOWERS"), "{table}");
        assert!(lines[3].ends_with('-'), "an open segment has no successors");
        assert!(lines[1].contains("LOST"), "{table}");
        assert_eq!(lines.len(), 5, "{table}");
        assert!(lines[4].starts_with("segment 1: 3 offsets lost"), "{table}");
        // Columns line up: every row is as wide as the header up to the
        // successors column.
        let successors_at = lines[1].find("SUCCESSORS").unwrap();
        assert!(lines[2..4].iter().all(|l| l.len() > successors_at));
    }

    #[test]
    fn brokers_table_reads_well() {
        let brokers = vec![
            BrokerStatus {
                id: 2,
                shards: vec![
                    ShardAddress {
                        tcp: "127.0.0.1:7440".into(),
                        quic: "127.0.0.1:7440".into(),
                    };
                    2
                ],
                bytes_per_s: 5_000_000,
                records_per_s: 40_000,
                utilization_permille: 625,
                open_segments: 3,
                silent_ms: 1_250,
                ..BrokerStatus::default()
            },
            BrokerStatus {
                id: 1,
                ..BrokerStatus::default()
            },
        ];
        let table = brokers_table(&brokers);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("BROKER"));
        assert!(lines[1].trim_start().starts_with("1  -"), "{table}");
        let row = lines[2];
        assert!(row.trim_start().starts_with("2  127.0.0.1:7440"), "{table}");
        assert!(row.contains("5000000") && row.contains("40000"));
        assert!(
            row.contains("62.5%") && row.ends_with("1.2s ago"),
            "{table}"
        );
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(None), "-");
        assert_eq!(utc(Some(0)), "-");
        assert_eq!(utc(Some(1)), "1970-01-01T00:00:00Z");
        assert_eq!(utc(Some(951_782_400_000)), "2000-02-29T00:00:00Z");
        assert_eq!(utc(Some(951_868_799_999)), "2000-02-29T23:59:59Z");
        assert_eq!(utc(Some(4_107_542_400_000)), "2100-03-01T00:00:00Z");
        assert_eq!(utc(Some(1_709_164_800_000)), "2024-02-29T00:00:00Z");
        assert_eq!(utc(Some(1_735_689_599_000)), "2024-12-31T23:59:59Z");
    }
}
