//! Reassembly of chunked fragments on the receiving side: any arrival order, many at once.
//! The sequence layer has already made every segment unique, so counting bytes suffices.

use std::collections::HashMap;

use super::spare::Spares;

#[derive(Debug)]
pub struct Reassembly {
    pub tag: u8,
    pub buf: Vec<u8>,
    pub got: u32,
}

#[derive(Debug, Default)]
pub struct Reassembler {
    frags: HashMap<u32, Reassembly>,
}

impl Reassembler {
    /// Whether a chunk (id, tag, total) is consistent with what was seen of that fragment.
    pub fn consistent(&self, id: u32, tag: u8, total: u32) -> bool {
        match self.frags.get(&id) {
            Some(r) => r.tag == tag && r.buf.len() == total as usize,
            None => true,
        }
    }

    /// Stores one chunk (validated by `wire::parse`: offset + len <= total). Returns the whole
    /// fragment when this chunk completed it.
    pub fn add(
        &mut self,
        id: u32,
        tag: u8,
        total: u32,
        offset: u32,
        data: &[u8],
        spares: &mut Spares,
    ) -> Option<(u8, Vec<u8>)> {
        // Every byte of `buf` is overwritten by exactly one chunk before delivery (the sequence
        // layer made chunks unique and `got` counts them), so a spare's old bytes never show.
        let r = self.frags.entry(id).or_insert_with(|| Reassembly {
            tag,
            buf: spares.filled(total as usize),
            got: 0,
        });
        let o = offset as usize;
        r.buf[o..o + data.len()].copy_from_slice(data);
        r.got += data.len() as u32;
        if r.got as usize >= r.buf.len() {
            let r = self.frags.remove(&id)?;
            return Some((r.tag, r.buf));
        }
        None
    }

    pub fn clear(&mut self) {
        self.frags.clear();
    }
}
