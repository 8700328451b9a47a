//! Sync points over the call timeline, binned adaptively so memory stays bounded.

use serde::Serialize;

/// One bin of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct TimelineBin {
    /// Index of the first call in the bin.
    pub first_call: u64,
    /// Sync points in the bin.
    pub syncs: u64,
    /// Bytes sent up by the segments ending in this bin.
    pub bytes_up: u64,
    /// Bytes brought down at the sync points of this bin.
    pub bytes_down: u64,
}

/// At most `max_bins` bins; when a call index falls beyond, bins are merged pairwise and their
/// width doubles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// Calls per bin.
    pub bin_width: u64,
    /// Bins, in call order; bin `i` covers calls `[i*bin_width, (i+1)*bin_width)`.
    pub bins: Vec<TimelineBin>,
    #[serde(skip)]
    max_bins: usize,
}

impl Timeline {
    /// An empty timeline.
    pub fn new(max_bins: usize) -> Self {
        Timeline { bin_width: 1, bins: Vec::new(), max_bins: max_bins.max(2) }
    }

    /// Record a sync point at `call`.
    pub fn add(&mut self, call: u64, up: u64, down: u64) {
        let mut i = call / self.bin_width;
        while i >= self.max_bins as u64 {
            self.merge();
            i = call / self.bin_width;
        }
        let i = i as usize;
        while self.bins.len() <= i {
            let first_call = self.bins.len() as u64 * self.bin_width;
            self.bins.push(TimelineBin { first_call, ..TimelineBin::default() });
        }
        if let Some(b) = self.bins.get_mut(i) {
            b.syncs += 1;
            b.bytes_up = b.bytes_up.saturating_add(up);
            b.bytes_down = b.bytes_down.saturating_add(down);
        }
    }

    fn merge(&mut self) {
        self.bin_width = self.bin_width.saturating_mul(2);
        let old = std::mem::take(&mut self.bins);
        for pair in old.chunks(2) {
            let mut b = TimelineBin { first_call: self.bins.len() as u64 * self.bin_width, ..TimelineBin::default() };
            for x in pair {
                b.syncs += x.syncs;
                b.bytes_up = b.bytes_up.saturating_add(x.bytes_up);
                b.bytes_down = b.bytes_down.saturating_add(x.bytes_down);
            }
            self.bins.push(b);
        }
    }
}
