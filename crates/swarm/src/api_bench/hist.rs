//! A latency histogram for millions of samples: log-linear buckets over microseconds (32
//! buckets per power of two, so a reported percentile is within 1/32 ≈ 3% of the sample it
//! stands for), mergeable, a few kilobytes each.

/// Values below this are their own bucket.
const LINEAR: u64 = 64;
/// Buckets per power of two above [`LINEAR`] (2^SUB_BITS).
const SUB_BITS: u32 = 5;
/// Bucket count: the linear ones, then 32 per power of two from 2^6 to 2^63.
const BUCKETS: usize = LINEAR as usize + (64 - 6) * (1 << SUB_BITS);

/// Counts of microsecond values.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }
}

fn bucket(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= 6
    let sub = (v >> (exp - SUB_BITS)) - (1 << SUB_BITS); // 0..32
    LINEAR as usize + (exp as usize - 6) * (1 << SUB_BITS) + sub as usize
}

/// The largest value that falls in bucket `i`.
fn bucket_high(i: usize) -> u64 {
    if i < LINEAR as usize {
        return i as u64;
    }
    let k = i - LINEAR as usize;
    let exp = (k >> SUB_BITS) as u32 + 6;
    let sub = (k & ((1 << SUB_BITS) - 1)) as u64;
    let low = ((1 << SUB_BITS) + sub) << (exp - SUB_BITS);
    low + ((1u64 << (exp - SUB_BITS)) - 1)
}

impl Histogram {
    /// Records one value (microseconds).
    pub fn record(&mut self, micros: u64) {
        if let Some(c) = self.counts.get_mut(bucket(micros)) {
            *c += 1;
        }
        self.total += 1;
        self.max = self.max.max(micros);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The largest value recorded (exact).
    pub fn max(&self) -> Option<u64> {
        (self.total > 0).then_some(self.max)
    }

    /// The nearest-rank percentile (`q` in 0..=1): the upper end of the bucket holding the
    /// sample of that rank, never above the largest value recorded; `None` when empty.
    pub fn percentile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_high(i).min(self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact_and_large_ones_within_three_percent() {
        for v in [0, 1, 63] {
            assert_eq!(bucket_high(bucket(v)), v);
        }
        for v in [
            64u64,
            100,
            1_000,
            12_345,
            999_999,
            50_000_000,
            u64::MAX / 3,
            u64::MAX,
        ] {
            let hi = bucket_high(bucket(v));
            assert!(hi >= v, "{v}: bucket ends at {hi}");
            assert!(
                (hi - v) as f64 <= v as f64 / 32.0,
                "{v}: bucket ends at {hi}"
            );
        }
        assert!(bucket(u64::MAX) < BUCKETS);
    }

    #[test]
    fn percentiles_use_nearest_rank_over_buckets() {
        let mut h = Histogram::default();
        assert_eq!(h.percentile(0.5), None);
        assert_eq!(h.max(), None);
        for v in 1..=100 {
            h.record(v * 1000);
        }
        let p50 = h.percentile(0.5).unwrap();
        assert!((50_000..=51_600).contains(&p50), "{p50}");
        let p99 = h.percentile(0.99).unwrap();
        assert!((99_000..=100_000).contains(&p99), "{p99}");
        assert_eq!(h.percentile(1.0), Some(100_000));
        assert_eq!(h.max(), Some(100_000));
        assert_eq!(h.count(), 100);
    }

    #[test]
    fn merging_adds_counts_and_keeps_the_max() {
        let mut a = Histogram::default();
        let mut b = Histogram::default();
        a.record(10);
        b.record(20);
        b.record(5_000);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.max(), Some(5_000));
        assert_eq!(a.percentile(0.5), Some(20));
    }
}
