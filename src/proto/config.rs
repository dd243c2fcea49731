//! Validation of `Config` (every rule names the field it is about).

use super::api::{Config, ConfigError};
use super::seq::MAX_WINDOW;
use super::wire::{BASE_LEN, REGION_LEN};

/// Smallest priority datagram: a base header plus a useful tiny payload.
pub const MIN_PRIORITY_MTU: usize = 2 * BASE_LEN;
/// Smallest data datagram: the largest header plus as many payload bytes.
pub const MIN_DATA_MTU: usize = 2 * REGION_LEN;
/// Largest data datagram (payload_len is a u16 on the wire).
pub const MAX_MTU: usize = 65_535;

pub fn validate(c: &Config) -> Result<(), ConfigError> {
    let err = |m: String| Err(ConfigError(m));
    if c.window == 0 || c.window > MAX_WINDOW {
        return err(format!("window: {} is not in 1..={MAX_WINDOW}", c.window));
    }
    if c.priority_mtu < MIN_PRIORITY_MTU || c.priority_mtu > MAX_MTU {
        return err(format!(
            "priority_mtu: {} is not in {MIN_PRIORITY_MTU}..={MAX_MTU} bytes",
            c.priority_mtu
        ));
    }
    if c.data_mtu < MIN_DATA_MTU || c.data_mtu > MAX_MTU {
        return err(format!(
            "data_mtu: {} is not in {MIN_DATA_MTU}..={MAX_MTU} bytes",
            c.data_mtu
        ));
    }
    if c.data_mtu < c.priority_mtu {
        return err(format!(
            "data_mtu: {} is smaller than priority_mtu {} (retransmissions of tiny messages go on the data channel)",
            c.data_mtu, c.priority_mtu
        ));
    }
    if c.rto_min.0 == 0 {
        return err("rto_min: must be greater than zero".into());
    }
    if c.rto_min > c.rto_initial || c.rto_initial > c.rto_max {
        return err(format!(
            "rto_initial: need rto_min ({} ns) <= rto_initial ({} ns) <= rto_max ({} ns)",
            c.rto_min.0, c.rto_initial.0, c.rto_max.0
        ));
    }
    if c.ack_delay >= c.rto_min {
        return err(format!(
            "ack_delay: {} ns must be shorter than rto_min {} ns (else every delayed ACK looks like a loss)",
            c.ack_delay.0, c.rto_min.0
        ));
    }
    if c.data_turn == 0 {
        return err("data_turn: must be at least 1".into());
    }
    if c.max_resends_per_pass == 0 {
        return err("max_resends_per_pass: must be at least 1".into());
    }
    if c.peer_timeout < c.rto_max {
        return err(format!(
            "peer_timeout: {} ns is shorter than rto_max {} ns",
            c.peer_timeout.0, c.rto_max.0
        ));
    }
    if c.data_credits == 0 {
        return err("data_credits: must be at least 1".into());
    }
    if c.priority_credits == 0 {
        return err("priority_credits: must be at least 1".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::api::Duration;

    #[test]
    fn default_is_valid_and_each_rule_names_its_field() {
        assert_eq!(validate(&Config::default()), Ok(()));
        type Case = (&'static str, Box<dyn Fn(&mut Config)>);
        let cases: Vec<Case> = vec![
            ("window", Box::new(|c| c.window = 0)),
            ("window", Box::new(|c| c.window = 4097)),
            ("priority_mtu", Box::new(|c| c.priority_mtu = 40)),
            ("data_mtu", Box::new(|c| c.data_mtu = 100)),
            ("data_mtu", Box::new(|c| c.data_mtu = 700)),
            ("data_mtu", Box::new(|c| c.data_mtu = 70_000)),
            ("rto_min", Box::new(|c| c.rto_min = Duration(0))),
            (
                "rto_initial",
                Box::new(|c| c.rto_initial = Duration::from_micros(100)),
            ),
            (
                "rto_initial",
                Box::new(|c| c.rto_max = Duration::from_millis(1)),
            ),
            (
                "ack_delay",
                Box::new(|c| c.ack_delay = Duration::from_millis(1)),
            ),
            (
                "max_resends_per_pass",
                Box::new(|c| c.max_resends_per_pass = 0),
            ),
            (
                "peer_timeout",
                Box::new(|c| c.peer_timeout = Duration::from_millis(1)),
            ),
            ("data_credits", Box::new(|c| c.data_credits = 0)),
            ("priority_credits", Box::new(|c| c.priority_credits = 0)),
        ];
        for (field, f) in cases {
            let mut c = Config::default();
            f(&mut c);
            let e = validate(&c).expect_err(field);
            assert!(e.0.starts_with(field), "{e} should name {field}");
        }
    }
}
