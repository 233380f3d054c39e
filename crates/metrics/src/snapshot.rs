//! The snapshot: every metric family at one moment, as it travels between the master and
//! its readers (msgpack, named fields), and the checks a decoded one must pass.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// The snapshot format this crate writes and reads.
pub const FORMAT: u32 = 1;

/// What every family's name starts with.
pub const PREFIX: &str = "halite_master_";

/// The reader's own "is the master there" gauge: no family of a snapshot may take it.
pub const UP: &str = "halite_master_up";

/// The most bytes a snapshot may take on the wire (the master's is a few KiB).
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 20;

/// Most families in one snapshot.
const MAX_FAMILIES: usize = 256;
/// Most samples in one family.
const MAX_SAMPLES: usize = 1024;
/// Most labels on one sample.
const MAX_LABELS: usize = 8;
/// Most buckets of one histogram (with `+Inf`).
const MAX_BUCKETS: usize = 64;
/// Longest name, help text or label value.
const MAX_TEXT: usize = 512;

/// Every metric family at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// [`FORMAT`].
    pub format: u32,
    /// The families, in the order the master lists them.
    pub families: Vec<Family>,
}

/// One metric family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Family {
    /// The name without the unit and without `_total` (the encoder adds those), starting
    /// with [`PREFIX`].
    pub name: String,
    /// One line saying what it counts.
    pub help: String,
    /// Counter, gauge or histogram; every sample's value is of this kind.
    pub kind: Kind,
    /// The unit, appended to the name by the encoder (`..._seconds`).
    pub unit: Option<Unit>,
    /// One sample per label set.
    pub samples: Vec<Sample>,
}

/// The kind of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// Only goes up (from the master's start).
    Counter,
    /// A value now.
    Gauge,
    /// Observations in buckets.
    Histogram,
}

/// The unit of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    /// Seconds.
    Seconds,
    /// Bytes.
    Bytes,
}

impl Unit {
    /// The OpenMetrics name of the unit (`seconds`, `bytes`).
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Bytes => "bytes",
        }
    }
}

/// One labelled value of a family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// `(name, value)` pairs, names unique.
    pub labels: Vec<(String, String)>,
    /// The value, of the family's kind.
    pub value: SampleValue,
}

/// A sample's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SampleValue {
    /// A counter's count.
    Counter(u64),
    /// A gauge's value.
    Gauge(i64),
    /// A histogram's buckets, sum and count.
    Histogram(HistogramSample),
}

impl SampleValue {
    fn kind(&self) -> Kind {
        match self {
            SampleValue::Counter(_) => Kind::Counter,
            SampleValue::Gauge(_) => Kind::Gauge,
            SampleValue::Histogram(_) => Kind::Histogram,
        }
    }
}

/// A histogram at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistogramSample {
    /// `(upper bound, observations in this bucket alone)`: bounds strictly increasing,
    /// finite except the last, which is `+Inf`. Not cumulative (the text encoder adds them
    /// up).
    pub buckets: Vec<(f64, u64)>,
    /// The sum of the observations.
    pub sum: f64,
    /// The number of observations: the buckets' total.
    pub count: u64,
}

impl Snapshot {
    /// A snapshot of `families` in the current [`FORMAT`].
    pub fn new(families: Vec<Family>) -> Snapshot {
        Snapshot {
            format: FORMAT,
            families,
        }
    }

    /// The family called `name` (without unit or `_total`).
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The msgpack form (maps with field names, so a reader ignores fields it does not
    /// know).
    ///
    /// # Errors
    /// [`Error::Encode`] when serialization fails (a bug), and [`Error::TooLarge`] when the
    /// result is over [`MAX_SNAPSHOT_BYTES`], which a reader would refuse.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let bytes = rmp_serde::to_vec_named(self).map_err(|e| Error::Encode(e.to_string()))?;
        if bytes.len() > MAX_SNAPSHOT_BYTES {
            return Err(Error::TooLarge {
                size: bytes.len() as u64,
                limit: MAX_SNAPSHOT_BYTES,
            });
        }
        Ok(bytes)
    }

    /// Decodes and [validates](Snapshot::validate) a snapshot.
    ///
    /// # Errors
    /// [`Error::TooLarge`] over [`MAX_SNAPSHOT_BYTES`]; [`Error::Malformed`] when the bytes
    /// are not a snapshot or it fails validation.
    pub fn decode(bytes: &[u8]) -> Result<Snapshot> {
        if bytes.len() > MAX_SNAPSHOT_BYTES {
            return Err(Error::TooLarge {
                size: bytes.len() as u64,
                limit: MAX_SNAPSHOT_BYTES,
            });
        }
        let snapshot: Snapshot =
            rmp_serde::from_slice(bytes).map_err(|e| Error::Malformed(e.to_string()))?;
        snapshot.validate()?;
        Ok(snapshot)
    }

    /// Checks what an encoder relies on: the format; at most 256 families of at most 1,024
    /// samples; names that are OpenMetrics names starting with [`PREFIX`] (not [`UP`]),
    /// each used once; help texts and label values of at most 512 characters without
    /// control characters; label names that are OpenMetrics label names, unique on a sample
    /// (`le` is not allowed on a histogram's), and no label set twice in a family; sample
    /// values of the family's kind; histogram buckets strictly increasing, finite but the
    /// last (`+Inf`), adding up to `count` without overflow, and a finite `sum`.
    ///
    /// # Errors
    /// [`Error::Malformed`] naming the first problem.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Malformed(what));
        if self.format != FORMAT {
            return bad(format!(
                "format {} (this reader knows {FORMAT})",
                self.format
            ));
        }
        if self.families.len() > MAX_FAMILIES {
            return bad(format!("{} families", self.families.len()));
        }
        let mut names = HashSet::new();
        for f in &self.families {
            let prefixed = f.name.len() > PREFIX.len() && f.name.starts_with(PREFIX);
            if !is_metric_name(&f.name) || !prefixed || f.name == UP {
                return bad(format!("family name {:?}", f.name));
            }
            if !names.insert(f.name.as_str()) {
                return bad(format!("family {} twice", f.name));
            }
            if !is_text(&f.help) {
                return bad(format!("help of {}", f.name));
            }
            if f.samples.len() > MAX_SAMPLES {
                return bad(format!("{} samples in {}", f.samples.len(), f.name));
            }
            let mut label_sets = HashSet::new();
            for sample in &f.samples {
                if sample.value.kind() != f.kind {
                    return bad(format!("a {:?} sample in {}", sample.value.kind(), f.name));
                }
                check_labels(f, sample)?;
                let mut sorted: Vec<&(String, String)> = sample.labels.iter().collect();
                sorted.sort();
                if !label_sets.insert(sorted) {
                    return bad(format!("one label set twice in {}", f.name));
                }
                if let SampleValue::Histogram(h) = &sample.value {
                    check_histogram(&f.name, h)?;
                }
            }
        }
        Ok(())
    }
}

/// The labels of one sample of `family`.
fn check_labels(family: &Family, sample: &Sample) -> Result<()> {
    let bad = |what: String| Err(Error::Malformed(format!("{what} in {}", family.name)));
    if sample.labels.len() > MAX_LABELS {
        return bad(format!("{} labels", sample.labels.len()));
    }
    let mut seen = HashSet::new();
    for (name, value) in &sample.labels {
        if !is_label_name(name) || (family.kind == Kind::Histogram && name == "le") {
            return bad(format!("label name {name:?}"));
        }
        if !seen.insert(name.as_str()) {
            return bad(format!("label {name} twice"));
        }
        if !is_text(value) {
            return bad(format!("the value of label {name}"));
        }
    }
    Ok(())
}

/// The buckets, sum and count of one histogram of family `name`.
fn check_histogram(name: &str, h: &HistogramSample) -> Result<()> {
    let bad = |what: &str| Err(Error::Malformed(format!("{what} in histogram {name}")));
    if h.buckets.is_empty() || h.buckets.len() > MAX_BUCKETS {
        return bad("bucket count");
    }
    let mut total: u64 = 0;
    let mut previous = f64::NEG_INFINITY;
    let last = h.buckets.len() - 1;
    for (i, (bound, n)) in h.buckets.iter().enumerate() {
        let in_order = *bound > previous;
        let finite_or_last = if i == last {
            *bound == f64::INFINITY
        } else {
            bound.is_finite()
        };
        if !in_order || !finite_or_last {
            return bad("bucket bounds");
        }
        previous = *bound;
        total = match total.checked_add(*n) {
            Some(t) => t,
            None => return bad("bucket counts overflowing"),
        };
    }
    if total != h.count {
        return bad("buckets not adding up to the count");
    }
    if !h.sum.is_finite() {
        return bad("sum");
    }
    Ok(())
}

/// An OpenMetrics metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`, at most [`MAX_TEXT`] bytes.
fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_TEXT
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

/// An OpenMetrics label name: `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__`
/// (reserved), at most [`MAX_TEXT`] bytes.
fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_TEXT
        && !name.starts_with("__")
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A help text or label value: at most [`MAX_TEXT`] bytes, no control characters.
fn is_text(text: &str) -> bool {
    text.len() <= MAX_TEXT && !text.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(name: &str, labels: &[(&str, &str)], n: u64) -> Family {
        Family {
            name: name.to_owned(),
            help: "What it counts.".to_owned(),
            kind: Kind::Counter,
            unit: None,
            samples: vec![Sample {
                labels: labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                value: SampleValue::Counter(n),
            }],
        }
    }

    fn histogram(buckets: Vec<(f64, u64)>, sum: f64, count: u64) -> Family {
        Family {
            name: "halite_master_latency".to_owned(),
            help: "Latency.".to_owned(),
            kind: Kind::Histogram,
            unit: Some(Unit::Seconds),
            samples: vec![Sample {
                labels: vec![("cmd".to_owned(), "publish".to_owned())],
                value: SampleValue::Histogram(HistogramSample {
                    buckets,
                    sum,
                    count,
                }),
            }],
        }
    }

    fn malformed(s: &Snapshot) -> String {
        match s.validate() {
            Err(Error::Malformed(m)) => m,
            other => panic!("expected a malformed snapshot, got {other:?}"),
        }
    }

    #[test]
    fn a_snapshot_survives_encoding_and_decoding() {
        let s = Snapshot::new(vec![
            counter("halite_master_publishes", &[], 3),
            histogram(vec![(0.5, 1), (1.0, 0), (f64::INFINITY, 2)], 7.25, 3),
        ]);
        let bytes = s.encode().unwrap();
        assert_eq!(Snapshot::decode(&bytes).unwrap(), s);
        assert_eq!(
            s.family("halite_master_publishes").map(|f| f.kind),
            Some(Kind::Counter)
        );
    }

    #[test]
    fn bytes_that_are_not_a_snapshot_are_an_error_not_a_panic() {
        for bytes in [
            &b""[..],
            b"\xc1",
            b"\x92\x01",
            b"\xdf\xff\xff\xff\xff",
            b"\x82\xa6format\x01\xa8families\xdd\xff\xff\xff\xff",
        ] {
            assert!(
                matches!(Snapshot::decode(bytes), Err(Error::Malformed(_))),
                "{bytes:?}"
            );
        }
        let good = Snapshot::new(vec![counter("halite_master_x", &[], 1)])
            .encode()
            .unwrap();
        for cut in 0..good.len() {
            assert!(Snapshot::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn oversized_input_is_refused_before_decoding() {
        let big = vec![0u8; MAX_SNAPSHOT_BYTES + 1];
        assert!(matches!(
            Snapshot::decode(&big),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn names_must_be_prefixed_metric_names_used_once() {
        for name in [
            "up",
            "halite_master_",
            "halite_master_a-b",
            UP,
            "9halite_master_x",
        ] {
            let s = Snapshot::new(vec![counter(name, &[], 1)]);
            assert!(malformed(&s).contains("family name"), "{name}");
        }
        let twice = Snapshot::new(vec![
            counter("halite_master_x", &[], 1),
            counter("halite_master_x", &[], 2),
        ]);
        assert!(malformed(&twice).contains("twice"));
    }

    #[test]
    fn labels_must_be_valid_unique_and_free_of_control_characters() {
        for labels in [
            &[("__reserved", "x")][..],
            &[("bad-name", "x")],
            &[("a", "x"), ("a", "y")],
            &[("a", "line\nbreak")],
        ] {
            let s = Snapshot::new(vec![counter("halite_master_x", labels, 1)]);
            assert!(malformed(&s).contains("label"), "{labels:?}");
        }
        let mut f = counter("halite_master_x", &[("a", "1"), ("b", "2")], 1);
        let mut same = f.samples[0].clone();
        same.labels.reverse();
        f.samples.push(same);
        assert!(malformed(&Snapshot::new(vec![f])).contains("label set twice"));
        let mut h = histogram(vec![(f64::INFINITY, 0)], 0.0, 0);
        h.samples[0].labels = vec![("le".to_owned(), "1".to_owned())];
        assert!(malformed(&Snapshot::new(vec![h])).contains("label name"));
    }

    #[test]
    fn help_text_may_not_break_the_exposition() {
        let mut f = counter("halite_master_x", &[], 1);
        f.help = "two\nlines".to_owned();
        assert!(malformed(&Snapshot::new(vec![f])).contains("help"));
    }

    #[test]
    fn sample_values_must_match_the_family_kind() {
        let mut f = counter("halite_master_x", &[], 1);
        f.kind = Kind::Gauge;
        assert!(malformed(&Snapshot::new(vec![f])).contains("sample"));
    }

    #[test]
    fn histogram_buckets_must_be_ordered_end_at_infinity_and_add_up() {
        let inf = f64::INFINITY;
        for (buckets, sum, count) in [
            (vec![], 0.0, 0),
            (vec![(1.0, 1)], 1.0, 1),
            (vec![(2.0, 1), (1.0, 0), (inf, 0)], 1.0, 1),
            (vec![(f64::NAN, 0), (inf, 0)], 0.0, 0),
            (vec![(1.0, 1), (inf, 1)], 1.0, 3),
            (vec![(1.0, u64::MAX), (inf, 1)], 1.0, 0),
            (vec![(1.0, 0), (inf, 0)], f64::NAN, 0),
        ] {
            let s = Snapshot::new(vec![histogram(buckets.clone(), sum, count)]);
            assert!(
                malformed(&s).contains("histogram"),
                "{buckets:?} {sum} {count}"
            );
        }
    }

    #[test]
    fn another_format_is_refused() {
        let mut s = Snapshot::new(vec![]);
        s.format = FORMAT + 1;
        assert!(malformed(&s).contains("format"));
    }
}
