//! How long a failed authentication waits (Salt's `LoadAuth.time_auth`).

use std::time::Duration;

/// Pads failed authentications so that their timing tells nothing: a wrong password for a
/// known user (a bcrypt hash, PAM's own delay) and an unknown user (nothing to hash) take
/// about equally long.
///
/// Salt remembers the slowest failure seen so far (`max_fail`, starting at 1 s) and makes
/// each failure last a uniformly random time within ±25 % of it. This type does the same
/// with two bounds:
/// - a **floor** ([`FailureDelay::DEFAULT_FLOOR`], Salt's initial `max_fail`): the slowest
///   failure is never taken to be shorter, so a backend whose failures are instant (PAM
///   without `pam_faildelay`, an unknown user in a file) still costs a guesser that long;
/// - a **ceiling** ([`FailureDelay::DEFAULT_CEILING`]): one slow outlier (a stalled
///   directory, an NFS hiccup while reading a file) raises the slowest failure at most to
///   it, so it cannot make every later failure slow for the master's lifetime. Salt has no
///   ceiling.
///
/// Pure: no clock, no randomness of its own. The caller times the attempt, draws a uniform
/// fraction in `[0, 1)` from a CSPRNG (Salt uses `SystemRandom`), calls
/// [`FailureDelay::pad`] and sleeps for the answer before it replies, on the thread that ran
/// the backend. Successes are not padded (as in Salt) and do not update the state.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureDelay {
    slowest: Duration,
    floor: Duration,
    ceiling: Duration,
}

impl Default for FailureDelay {
    fn default() -> Self {
        FailureDelay::new(Self::DEFAULT_FLOOR, Self::DEFAULT_CEILING)
    }
}

impl FailureDelay {
    /// The default floor: 1 s, Salt's initial `max_fail`.
    pub const DEFAULT_FLOOR: Duration = Duration::from_secs(1);
    /// The default ceiling: 5 s.
    pub const DEFAULT_CEILING: Duration = Duration::from_secs(5);

    /// A delay that takes the slowest failure to be at least `floor` and at most `ceiling`
    /// (a `ceiling` below `floor` is raised to it).
    pub fn new(floor: Duration, ceiling: Duration) -> FailureDelay {
        FailureDelay {
            slowest: floor,
            floor,
            ceiling: ceiling.max(floor),
        }
    }

    /// A failure took `elapsed`; `fraction` is a uniform random number in `[0, 1)`
    /// (anything else is clamped; NaN counts as 0.5). Records the failure and answers how
    /// much longer to wait: the failure should last `slowest × (0.75 + fraction / 2)` in
    /// all, where `slowest` is the slowest failure so far within the floor and ceiling.
    /// The total is at most 1.25 × the ceiling.
    pub fn pad(&mut self, elapsed: Duration, fraction: f64) -> Duration {
        self.slowest = self.slowest.max(elapsed.min(self.ceiling));
        let fraction = if fraction.is_nan() {
            0.5
        } else {
            fraction.clamp(0.0, 1.0)
        };
        let target = self.slowest.mul_f64(0.75 + fraction / 2.0);
        target.saturating_sub(elapsed)
    }

    /// The slowest failure recorded so far (within the floor and ceiling).
    pub fn slowest(&self) -> Duration {
        self.slowest
    }

    /// The floor.
    pub fn floor(&self) -> Duration {
        self.floor
    }

    /// The ceiling.
    pub fn ceiling(&self) -> Duration {
        self.ceiling
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn fast_failures_are_padded_to_around_the_floor() {
        let mut d = FailureDelay::default();
        assert_eq!(d.pad(MS(10), 0.0), MS(740));
        assert_eq!(d.pad(MS(10), 0.5), MS(990));
        assert_eq!(d.pad(MS(10), 1.0), MS(1240));
        assert_eq!(d.slowest(), FailureDelay::DEFAULT_FLOOR);
    }

    #[test]
    fn the_slowest_failure_raises_every_later_delay() {
        let mut d = FailureDelay::new(MS(200), MS(5000));
        assert_eq!(
            d.pad(MS(3000), 0.5),
            Duration::ZERO,
            "3 s is the new slowest"
        );
        assert_eq!(d.slowest(), MS(3000));
        // An instant failure (unknown user) now lasts as long as a slow one.
        assert_eq!(d.pad(MS(1), 0.5), MS(2999));
        assert_eq!(d.pad(MS(1), 0.0), MS(2249));
        assert_eq!(d.pad(MS(1), 1.0), MS(3749));
    }

    #[test]
    fn an_outlier_raises_the_slowest_failure_only_to_the_ceiling() {
        let mut d = FailureDelay::new(MS(200), MS(5000));
        assert_eq!(d.pad(Duration::from_secs(60), 0.5), Duration::ZERO);
        assert_eq!(d.slowest(), MS(5000));
        assert_eq!(d.pad(MS(1), 1.0), MS(6249));
    }

    #[test]
    fn fractions_out_of_range_are_clamped() {
        let mut d = FailureDelay::new(MS(1000), MS(1000));
        assert_eq!(d.pad(MS(0), -3.0), MS(750));
        assert_eq!(d.pad(MS(0), 7.0), MS(1250));
        assert_eq!(d.pad(MS(0), f64::NAN), MS(1000));
        assert_eq!(d.pad(MS(0), f64::INFINITY), MS(1250));
    }

    #[test]
    fn a_ceiling_below_the_floor_is_raised_to_it() {
        let d = FailureDelay::new(MS(500), MS(100));
        assert_eq!(
            (d.floor(), d.ceiling(), d.slowest()),
            (MS(500), MS(500), MS(500))
        );
    }
}
