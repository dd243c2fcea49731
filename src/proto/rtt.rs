//! Round-trip estimation and the retransmit timeout (RFC 6298 style, Karn's rule applied by
//! the caller: only segments transmitted once give samples).

use super::api::Duration;

#[derive(Clone, Debug)]
pub struct Rtt {
    srtt: Option<u64>,
    rttvar: u64,
    min: Option<u64>,
    /// Exponential backoff exponent, reset by acknowledgement progress.
    pub backoff: u32,
    initial: u64,
    floor: u64,
    cap: u64,
}

impl Rtt {
    pub fn new(initial: Duration, floor: Duration, cap: Duration) -> Rtt {
        Rtt {
            srtt: None,
            rttvar: 0,
            min: None,
            backoff: 0,
            initial: initial.0,
            floor: floor.0,
            cap: cap.0,
        }
    }

    pub fn sample(&mut self, r: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let err = s.abs_diff(r);
                self.rttvar = (3 * self.rttvar + err) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
        self.min = Some(self.min.map_or(r, |m| m.min(r)));
    }

    /// The retransmit timeout including backoff, within [floor, cap].
    pub fn rto(&self) -> u64 {
        let base = match self.srtt {
            None => self.initial,
            Some(s) => s + (4 * self.rttvar).max(1_000),
        };
        let base = base.clamp(self.floor, self.cap);
        base.saturating_mul(1u64 << self.backoff.min(20))
            .min(self.cap)
    }

    pub fn backoff(&mut self) {
        if self.rto() < self.cap {
            self.backoff += 1;
        }
    }

    /// Smoothed RTT; before any sample, the initial timeout.
    pub fn srtt(&self) -> u64 {
        self.srtt.unwrap_or(self.initial)
    }

    /// Smallest RTT seen (the fast-repair clock); before any sample, the RTO floor.
    pub fn min_rtt(&self) -> u64 {
        self.min.unwrap_or(self.floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_cap_backoff() {
        let mut r = Rtt::new(
            Duration::from_millis(5),
            Duration::from_micros(500),
            Duration::from_millis(200),
        );
        assert_eq!(r.rto(), 5_000_000);
        for _ in 0..50 {
            r.sample(20_000);
        }
        assert_eq!(r.rto(), 500_000, "floor");
        r.backoff();
        assert_eq!(r.rto(), 1_000_000);
        for _ in 0..30 {
            r.backoff();
        }
        assert_eq!(r.rto(), 200_000_000, "cap");
        r.backoff = 0;
        for _ in 0..50 {
            r.sample(80_000_000);
        }
        assert!(r.rto() >= 80_000_000 && r.rto() <= 200_000_000);
        assert_eq!(r.min_rtt(), 20_000);
    }
}
