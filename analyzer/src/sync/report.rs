//! Per-policy results.

use std::collections::BTreeMap;

use serde::Serialize;

use super::timeline::Timeline;

/// One point of an empirical CDF.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EcdfPoint {
    /// Segment size (calls).
    pub size: u64,
    /// Fraction of segments with at most this size.
    pub fraction: f64,
}

/// Distribution of segment sizes (calls per round trip, the syncing call included).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SegmentStats {
    /// Number of segments (= sync points).
    pub count: u64,
    /// Mean size.
    pub mean: f64,
    /// Median size.
    pub median: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
    /// (size, number of segments) for every size seen.
    pub histogram: Vec<(u64, u64)>,
    /// The ECDF, one point per distinct size.
    pub ecdf: Vec<EcdfPoint>,
}

impl SegmentStats {
    /// Summarize a size → count histogram.
    pub fn from_histogram(h: &BTreeMap<u64, u64>) -> Self {
        let count: u64 = h.values().sum();
        let total: u128 = h.iter().map(|(s, c)| u128::from(*s) * u128::from(*c)).sum();
        let quantile = |q: f64| -> u64 {
            let target = (q * count as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (s, c) in h {
                seen += c;
                if seen >= target {
                    return *s;
                }
            }
            0
        };
        let mut seen = 0u64;
        let ecdf = h
            .iter()
            .map(|(s, c)| {
                seen += c;
                EcdfPoint { size: *s, fraction: seen as f64 / count.max(1) as f64 }
            })
            .collect();
        SegmentStats {
            count,
            mean: if count == 0 { 0.0 } else { total as f64 / count as f64 },
            median: quantile(0.5),
            p90: quantile(0.9),
            p99: quantile(0.99),
            max: h.keys().next_back().copied().unwrap_or(0),
            histogram: h.iter().map(|(s, c)| (*s, *c)).collect(),
            ecdf,
        }
    }
}

/// What one policy implies for a call stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyncReport {
    /// Policy name.
    pub policy: &'static str,
    /// Policy description.
    pub description: &'static str,
    /// Calls analyzed.
    pub calls: u64,
    /// Synchronization points.
    pub syncs: u64,
    /// `100 * syncs / calls`.
    pub sync_percent: f64,
    /// Bytes sent to the device in all.
    pub bytes_up: u64,
    /// Bytes brought to the host in all.
    pub bytes_down: u64,
    /// Mean bytes sent per sync point.
    pub bytes_up_per_sync: f64,
    /// Mean bytes brought down per sync point.
    pub bytes_down_per_sync: f64,
    /// Largest upload of one segment.
    pub max_bytes_up_per_sync: u64,
    /// Largest download at one sync point.
    pub max_bytes_down_per_sync: u64,
    /// Calls after the last sync point (flushed at exit; not a segment).
    pub trailing_calls: u64,
    /// Segment sizes.
    pub segments: SegmentStats,
    /// Sync points by reason (class name, `unmodeled`, `deferred-download`).
    pub reasons: BTreeMap<String, u64>,
    /// Sync points over the call timeline.
    pub timeline: Timeline,
}
