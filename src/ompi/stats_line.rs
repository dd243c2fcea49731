//! The statistics line (`btl_usnic_stats`): per module, every counter of the protocol core and
//! of the edges as `key=value`, periodically and once at finalize. Its form is documented in
//! docs/operations.md and keys never change meaning; tools and tests parse it.
use crate::proto::{Channel, Stats};

use super::component::Component;
use super::log;
use super::module::{ModuleCell, ModuleState};

/// Every counter of the protocol core, by its `Stats` field name (the statistics line's keys;
/// a unit test checks that none is missing).
pub fn core_counters(s: &Stats) -> [(&'static str, u64); 27] {
    [
        ("sends", s.sends),
        ("frag_sends", s.frag_sends),
        ("chunk_sends", s.chunk_sends),
        ("resends_timeout", s.resends_timeout),
        ("resends_fast", s.resends_fast),
        ("acks_alone", s.acks_alone),
        ("acks_piggybacked", s.acks_piggybacked),
        ("recvs", s.recvs),
        ("dup_recvs", s.dup_recvs),
        ("oow_low_recvs", s.oow_low_recvs),
        ("oow_high_recvs", s.oow_high_recvs),
        ("malformed_recvs", s.malformed_recvs),
        ("wrong_key_recvs", s.wrong_key_recvs),
        ("unknown_sender_recvs", s.unknown_sender_recvs),
        ("bad_chunk_recvs", s.bad_chunk_recvs),
        ("refused_writes", s.refused_writes),
        ("refused_gets", s.refused_gets),
        ("ack_recvs", s.ack_recvs),
        ("dup_acks", s.dup_acks),
        ("old_acks", s.old_acks),
        ("credits_exhausted", s.credits_exhausted),
        ("bytes_sent", s.bytes_sent),
        ("bytes_received", s.bytes_received),
        ("peers_failed", s.peers_failed),
        ("lent_released", s.lent_released),
        ("spurious_resends", s.spurious_resends),
        ("held_recvs", s.held_recvs),
    ]
}

/// The statistics line of one module (format documented in docs/operations.md): a marker,
/// then space-separated `key=value` pairs, keys never change meaning.
pub fn stats_line(
    rank: u32,
    m: &ModuleCell,
    now: &Stats,
    base: &Stats,
    st: &ModuleState,
    faults: bool,
    last: bool,
) -> String {
    use std::fmt::Write;
    let mut line = format!(
        "stats{} rank={rank} module={} iface={}",
        if last { " (final)" } else { "" },
        m.index,
        m.info.name
    );
    for ((k, v), (_, b)) in core_counters(now).into_iter().zip(core_counters(base)) {
        let _ = write!(line, " {k}={}", v.saturating_sub(b));
    }
    let (gso_sends, gso_datagrams) = st.fabric.batch_stats(Channel::Data);
    let (gro_reads, gro_datagrams) = st.fabric.gro_stats(Channel::Data);
    let _ = write!(
        line,
        " oversize_recvs={} puts={} gets={} frags_live={} gso_sends={gso_sends} \
         gso_datagrams={gso_datagrams} gro_reads={gro_reads} gro_datagrams={gro_datagrams} \
         busy_sends={} busy_batches={} cut_recvs={} lost_sends={} holds={}",
        st.oversize_recvs,
        st.puts,
        st.gets,
        st.frags.live,
        st.busy_sends,
        st.busy_batches,
        st.fabric.cut_recvs(Channel::Data),
        st.lost_sends
            + st.fabric.lost_batched(Channel::Data)
            + st.fabric.lost_batched(Channel::Priority),
        st.holds
    );
    if faults {
        let f = st.fabric.fault_stats();
        let _ = write!(
            line,
            " fault_sends_seen={} fault_send_dropped={} fault_send_duplicated={} \
             fault_send_dup_skipped={} fault_send_delayed={} fault_recvs_seen={} \
             fault_recv_dropped={} fault_recv_duplicated={}",
            f.sends_seen,
            f.send_dropped,
            f.send_duplicated,
            f.send_dup_skipped,
            f.send_delayed,
            f.recvs_seen,
            f.recv_dropped,
            f.recv_duplicated
        );
    }
    line
}

/// One statistics line per module.
pub fn print_stats(c: &Component, m: &ModuleCell, last: bool) {
    let mut st = m.state.borrow_mut();
    let now: Stats = st.engine.stats().clone();
    let base = if c.settings.stats_relative && !last {
        core::mem::replace(&mut st.stats_base, now.clone())
    } else {
        Stats::default()
    };
    let line = stats_line(
        c.my_vpid,
        m,
        &now,
        &base,
        &st,
        c.settings.faults.is_some(),
        last,
    );
    drop(st);
    log::plain(&line);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_counter_is_listed() {
        // Field names from Stats' Debug output: a counter added to the core without a key here
        // fails this test.
        let dbg = format!("{:?}", Stats::default());
        let body = dbg.split_once('{').unwrap().1.trim_end_matches('}');
        let fields: Vec<&str> = body
            .split(',')
            .filter_map(|f| f.split_once(':'))
            .map(|(k, _)| k.trim())
            .collect();
        let keys: Vec<&str> = core_counters(&Stats::default())
            .iter()
            .map(|(k, _)| *k)
            .collect();
        assert!(fields.len() >= 23, "{dbg}");
        for f in &fields {
            assert!(keys.contains(f), "Stats::{f} has no statistics key");
        }
        assert_eq!(keys.len(), fields.len());
    }
}
