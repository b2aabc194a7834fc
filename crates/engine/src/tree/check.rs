//! `check`: every leaf image read and verified (checksum, structure, key order, keys within
//! the leaf's range), the record count compared; nothing is changed, nothing is cached.

use super::forest::NONE;
use super::{Inner, NODES_DIR};
use crate::error::{Error, Result};
use crate::log::segment::seg_file_name;
use crate::store::{CheckReport, Damaged};
use std::cmp::Ordering as KeyOrder;

impl Inner {
    pub(crate) fn check(&self) -> Result<CheckReport> {
        let mut rep = CheckReport {
            damage: self.findings.lock().clone(),
            ..CheckReport::default()
        };
        let f = self.forest.load_full();
        let mut id = 0;
        let mut entries = 0u64;
        let mut prev_last: Option<Vec<u8>> = None;
        loop {
            let slot = f.slot(id);
            let g = slot.read();
            let owned;
            let leaf = match g.leaf.as_deref() {
                Some(l) => l,
                None => match self.read_image(g.image) {
                    Ok(l) => {
                        owned = l;
                        &owned
                    }
                    Err(Error::Corrupt(why)) => {
                        rep.damage.push(Damaged {
                            file: format!("{NODES_DIR}/{}", seg_file_name(g.image.seg())),
                            off: g.image.off(),
                            len: u64::from(g.image.len),
                            lost: 1,
                            what: format!("a damaged leaf image ({why})"),
                        });
                        let r = g.right;
                        drop(g);
                        if r == NONE {
                            break;
                        }
                        id = r;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            let low = slot.low();
            let high = (g.right != NONE).then(|| f.slot(g.right).low()).flatten();
            for i in 0..leaf.len() {
                let k = leaf.key(i);
                let below_low = low.is_some_and(|l| self.cmp.cmp(k, l) == KeyOrder::Less);
                let above_high = high.is_some_and(|h| self.cmp.cmp(k, h) != KeyOrder::Less);
                if below_low || above_high {
                    rep.problems
                        .push(format!("leaf {id}: a key outside the leaf's range"));
                    break;
                }
                if i == 0 {
                    if let Some(p) = &prev_last {
                        if self.cmp.cmp(p, k) == KeyOrder::Greater {
                            rep.problems.push(format!("leaf {id}: keys out of order"));
                        }
                    }
                }
            }
            if !leaf.is_empty() {
                prev_last = Some(leaf.key(leaf.len() - 1).to_vec());
            }
            entries += leaf.len() as u64;
            let r = g.right;
            drop(g);
            if r == NONE {
                break;
            }
            id = r;
        }
        rep.records = entries;
        if rep.damage.is_empty() && entries != self.records() {
            rep.problems.push(format!(
                "the record count says {} but the leaves hold {entries}",
                self.records()
            ));
        }
        Ok(rep)
    }
}
