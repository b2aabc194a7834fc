//! The inner levels of the B+ tree: which leaf holds a key. Copy on write: a lookup loads the
//! root (`ArcSwap`, no lock, no shared counter written) and descends; a split inserts its
//! separator by copying the path from the root to the bottom node under one mutex, then
//! publishes the new root. Leaves are never merged, so a leaf id found in an old root stays
//! valid: the leaf's right links lead on from it (B-link).

use super::cmp::Cmp;
use super::leaf::head;
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::cmp::Ordering;
use std::sync::Arc;

/// Children of a node at most; a node is split in two beyond it.
const FANOUT: usize = 256;

/// A key shared between the index and the leaf table.
pub(crate) type Key = Arc<[u8]>;

pub(crate) struct Node {
    /// `kids.len() - 1` separators: child `i` holds the keys in `[seps[i-1], seps[i])`.
    seps: Vec<Key>,
    /// `leaf::head` of each separator: a lexical descent compares these first.
    heads: Vec<u64>,
    kids: Kids,
}

impl Node {
    fn new(seps: Vec<Key>, kids: Kids) -> Arc<Node> {
        let heads = seps.iter().map(|s| head(s)).collect();
        Arc::new(Node { seps, heads, kids })
    }

    /// The number of separators `s` with `right(order of s against key)` false, when those
    /// form a prefix of `seps`.
    #[inline]
    fn count(&self, cmp: Cmp, key: &[u8], right: impl Fn(Ordering) -> bool) -> usize {
        let h = head(key);
        let (mut lo, mut hi) = (0, self.seps.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let by_head = match cmp {
                Cmp::Lex => self.heads[mid].cmp(&h),
                Cmp::LexDesc => h.cmp(&self.heads[mid]),
                _ => Ordering::Equal,
            };
            let o = if by_head == Ordering::Equal {
                cmp.cmp(&self.seps[mid], key)
            } else {
                by_head
            };
            if right(o) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}

enum Kids {
    Leaves(Vec<u32>),
    Nodes(Vec<Arc<Node>>),
}

impl Kids {
    fn len(&self) -> usize {
        match self {
            Kids::Leaves(v) => v.len(),
            Kids::Nodes(v) => v.len(),
        }
    }
}

pub(crate) struct Index {
    root: ArcSwap<Node>,
    update: Mutex<()>,
}

impl Index {
    /// An index of one leaf.
    pub fn new(first: u32) -> Index {
        Index::build(&[], &[first])
    }

    /// The index of leaves `ids` in key order, the first holding every key below `lows[0]`,
    /// leaf `i + 1` those from `lows[i]` on (`lows.len() == ids.len() - 1`).
    pub fn build(lows: &[Key], ids: &[u32]) -> Index {
        assert_eq!(lows.len() + 1, ids.len());
        // Bottom level: nodes of up to FANOUT leaves; the separator between two nodes is the
        // low key of the right one's first child.
        let mut level: Vec<(Option<Key>, Arc<Node>)> = Vec::new();
        let mut start = 0;
        while start < ids.len() {
            let end = (start + FANOUT).min(ids.len());
            let node = Node::new(
                lows[start..end - 1].to_vec(),
                Kids::Leaves(ids[start..end].to_vec()),
            );
            let low = if start == 0 {
                None
            } else {
                Some(lows[start - 1].clone())
            };
            level.push((low, node));
            start = end;
        }
        while level.len() > 1 {
            let mut up = Vec::new();
            for chunk in level.chunks(FANOUT) {
                let low = chunk[0].0.clone();
                let node = Node::new(
                    chunk[1..].iter().map(|c| c.0.clone().unwrap()).collect(),
                    Kids::Nodes(chunk.iter().map(|c| c.1.clone()).collect()),
                );
                up.push((low, node));
            }
            level = up;
        }
        let root = level.pop().map(|l| l.1).expect("at least one leaf");
        Index {
            root: ArcSwap::new(root),
            update: Mutex::new(()),
        }
    }

    /// The leaf whose range holds `key` (as of the root loaded: the leaf may have split
    /// since; its right links lead on).
    #[inline]
    pub fn find(&self, cmp: Cmp, key: &[u8]) -> u32 {
        let root = self.root.load();
        let mut node: &Node = &root;
        loop {
            let i = node.count(cmp, key, |o| o == Ordering::Greater);
            match &node.kids {
                Kids::Leaves(ids) => return ids[i],
                Kids::Nodes(kids) => node = &kids[i],
            }
        }
    }

    /// The leaf whose range holds the keys just below `key` (the last leaf whose low key is
    /// below it).
    pub fn find_before(&self, cmp: Cmp, key: &[u8]) -> u32 {
        let root = self.root.load();
        let mut node: &Node = &root;
        loop {
            let i = node.count(cmp, key, |o| o != Ordering::Less);
            match &node.kids {
                Kids::Leaves(ids) => return ids[i],
                Kids::Nodes(kids) => node = &kids[i],
            }
        }
    }

    /// The last leaf.
    pub fn last(&self) -> u32 {
        let root = self.root.load();
        let mut node: &Node = &root;
        loop {
            match &node.kids {
                Kids::Leaves(ids) => return *ids.last().expect("a node has children"),
                Kids::Nodes(kids) => node = kids.last().expect("a node has children"),
            }
        }
    }

    /// Record that leaf `id` now holds the keys from `sep` on (split off the leaf that held
    /// them).
    pub fn insert(&self, cmp: Cmp, sep: Key, id: u32) {
        let _g = self.update.lock();
        let root = self.root.load_full();
        let (node, split) = insert_into(&root, cmp, sep, id);
        let new_root = match split {
            None => node,
            Some((s, right)) => Node::new(vec![s], Kids::Nodes(vec![node, right])),
        };
        self.root.store(new_root);
    }

    /// Levels above the leaves, and bytes held (approximately), for `inform`.
    pub fn stats(&self) -> (usize, usize) {
        fn walk(n: &Node, bytes: &mut usize) -> usize {
            *bytes += 64 + n.seps.iter().map(|s| s.len() + 32).sum::<usize>();
            match &n.kids {
                Kids::Leaves(v) => {
                    *bytes += 4 * v.len();
                    1
                }
                Kids::Nodes(v) => {
                    *bytes += 8 * v.len();
                    1 + v.iter().map(|k| walk(k, bytes)).max().unwrap_or(0)
                }
            }
        }
        let mut bytes = 0;
        let depth = walk(&self.root.load(), &mut bytes);
        (depth, bytes)
    }
}

/// A copy of `node` with `(sep, id)` inserted below it, and the right half when it split.
fn insert_into(node: &Node, cmp: Cmp, sep: Key, id: u32) -> (Arc<Node>, Option<(Key, Arc<Node>)>) {
    let i = node.count(cmp, &sep, |o| o == Ordering::Greater);
    // Copies with room for one more and no more: a node is copied at every split below it,
    // and a doubled capacity would stay with the copy.
    let mut seps = Vec::with_capacity(node.seps.len() + 1);
    seps.extend_from_slice(&node.seps);
    let kids = match &node.kids {
        Kids::Leaves(ids) => {
            let mut ids = {
                let mut v = Vec::with_capacity(ids.len() + 1);
                v.extend_from_slice(ids);
                v
            };
            seps.insert(i, sep);
            ids.insert(i + 1, id);
            Kids::Leaves(ids)
        }
        Kids::Nodes(kids) => {
            let (kid, split) = insert_into(&kids[i], cmp, sep, id);
            let mut kids = {
                let mut v = Vec::with_capacity(kids.len() + 1);
                v.extend_from_slice(kids);
                v
            };
            kids[i] = kid;
            if let Some((s, right)) = split {
                seps.insert(i, s);
                kids.insert(i + 1, right);
            }
            Kids::Nodes(kids)
        }
    };
    let n = kids.len();
    if n <= FANOUT {
        return (Node::new(seps, kids), None);
    }
    // Split: the left keeps half; the separator between them moves up.
    let h = n / 2;
    let right_seps = seps.split_off(h);
    let up = seps.pop().expect("h >= 1");
    let (lk, rk) = match kids {
        Kids::Leaves(mut v) => {
            let r = v.split_off(h);
            (Kids::Leaves(v), Kids::Leaves(r))
        }
        Kids::Nodes(mut v) => {
            let r = v.split_off(h);
            (Kids::Nodes(v), Kids::Nodes(r))
        }
    };
    let left = Node::new(seps, lk);
    let right = Node::new(right_seps, rk);
    (left, Some((up, right)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> Key {
        Arc::from(format!("{n:08}").into_bytes().into_boxed_slice())
    }

    /// Splits inserted in any order find the same leaves as a sorted list does, before and
    /// after the nodes split, and an index built from the sorted list agrees.
    #[test]
    fn inserts_and_builds_agree_with_a_sorted_list() {
        let idx = Index::new(0);
        let mut lows: Vec<(u32, u32)> = Vec::new(); // (low key number, leaf id)
        let n = 5000u32;
        for j in 0..n {
            let k = (j * 7919) % n * 10 + 5;
            idx.insert(Cmp::Lex, key(k), j + 1);
            lows.push((k, j + 1));
        }
        lows.sort();
        let expect = |q: u32| {
            let i = lows.partition_point(|&(l, _)| l <= q);
            if i == 0 {
                0
            } else {
                lows[i - 1].1
            }
        };
        let built = Index::build(
            &lows.iter().map(|&(l, _)| key(l)).collect::<Vec<_>>(),
            &std::iter::once(0)
                .chain(lows.iter().map(|&(_, id)| id))
                .collect::<Vec<_>>(),
        );
        for q in (0..n * 10 + 10).step_by(3) {
            let k = format!("{q:08}");
            assert_eq!(idx.find(Cmp::Lex, k.as_bytes()), expect(q), "{q}");
            assert_eq!(built.find(Cmp::Lex, k.as_bytes()), expect(q), "{q}");
            let before = if q == 0 { 0 } else { expect(q - 1) };
            assert_eq!(idx.find_before(Cmp::Lex, k.as_bytes()), before, "{q}");
        }
        assert_eq!(idx.last(), lows.last().unwrap().1);
        assert!(idx.stats().0 >= 2);
    }
}
