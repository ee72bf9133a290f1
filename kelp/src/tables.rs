//! The tables admin commands print: a topic's segments (`topic
//! describe`, and the layout after a split, merge, move or policy change)
//! and a cluster's brokers (`cluster`). One row per line, columns padded
//! with spaces, `-` where there is nothing to show; times are UTC.

use client::{BrokerStatus, SegmentInfo, TopicInfo};

/// The segments table: every segment the topic ever had (sealed ones
/// with their successors), by range start then id, so a parent sits above
/// the pieces of its range.
pub fn describe_table(info: &TopicInfo) -> String {
    let mut segments: Vec<&SegmentInfo> = info.segments.iter().collect();
    segments.sort_by_key(|s| (s.start, s.id));
    let mut out = format!("topic {}\n", info.name);
    out += &format!(
        "{:>7}  {:>5}  {:<19}  {:<6}  {:>6}  {:>5}  {:<21}  {:>11}  {:>14}  {:>9}  {:>9}  {:<20}  {:>11}  {:<20}  {}\n",
        "SEGMENT",
        "EPOCH",
        "RANGE",
        "STATE",
        "BROKER",
        "SHARD",
        "ADDRESS",
        "NEXT OFFSET",
        "APPENDED BYTES",
        "BYTES/S",
        "RECORDS/S",
        "CREATED",
        "FIRST WRITE",
        "SEALED",
        "SUCCESSORS"
    );
    for s in segments {
        let successors: Vec<String> = s.successors.iter().map(u32::to_string).collect();
        let row = format!(
            "{:>7}  {:>5}  {:<19}  {:<6}  {:>6}  {:>5}  {:<21}  {:>11}  {:>14}  {:>9}  {:>9}  {:<20}  {:>11}  {:<20}  {}",
            s.id,
            s.epoch,
            format!("{:08x}-{:08x}", s.start, s.end),
            if s.sealed { "sealed" } else { "open" },
            s.broker.map_or_else(|| "-".to_owned(), |b| b.to_string()),
            s.shard,
            s.address.as_ref().map_or("-", |a| a.tcp.as_str()),
            s.next_offset,
            s.appended_bytes,
            s.bytes_per_s,
            s.records_per_s,
            utc(Some(s.created_ms)),
            // How long after its creation (for a successor: the split,
            // merge or move decision) the segment took its first record.
            s.first_append_ms.map_or_else(
                || "-".to_owned(),
                |t| format!("+{}ms", t.saturating_sub(s.created_ms))
            ),
            utc(s.sealed_ms),
            if successors.is_empty() {
                "-".to_owned()
            } else {
                successors.join(",")
            }
        );
        out += row.trim_end();
        out.push('\n');
    }
    out
}

/// The brokers table: id, shard 0's TCP address, shard count, load,
/// utilization, open segments and when each was last heard from.
pub fn brokers_table(brokers: &[BrokerStatus]) -> String {
    let mut brokers: Vec<&BrokerStatus> = brokers.iter().collect();
    brokers.sort_by_key(|b| b.id);
    let mut out = format!(
        "{:>6}  {:<21}  {:>6}  {:>12}  {:>10}  {:>6}  {:>13}  {}\n",
        "BROKER",
        "ADDRESS",
        "SHARDS",
        "BYTES/S",
        "RECORDS/S",
        "UTIL",
        "OPEN SEGMENTS",
        "LAST HEARD"
    );
    for b in brokers {
        let utilization = format!(
            "{}.{}%",
            b.utilization_permille / 10,
            b.utilization_permille % 10
        );
        let row = format!(
            "{:>6}  {:<21}  {:>6}  {:>12}  {:>10}  {:>6}  {:>13}  {}.{}s ago",
            b.id,
            b.shards.first().map_or("-", |s| s.tcp.as_str()),
            b.shards.len(),
            b.bytes_per_s,
            b.records_per_s,
            utilization,
            b.open_segments,
            b.silent_ms / 1000,
            (b.silent_ms % 1000) / 100,
        );
        out += row.trim_end();
        out.push('\n');
    }
    out
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
                    ..SegmentInfo::default()
                },
            ],
        };
        let table = describe_table(&info);
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
        assert!(lines[3].ends_with('-'), "an open segment has no successors");
        // Columns line up: every row is as wide as the header up to the
        // successors column.
        let successors_at = lines[1].find("SUCCESSORS").unwrap();
        assert!(lines[2..].iter().all(|l| l.len() > successors_at));
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
