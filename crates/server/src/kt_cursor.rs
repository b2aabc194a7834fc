//! Kyoto Tycoon's cursor procedures (`cur_jump` … `cur_delete`) and `match_similar`, on any
//! kind, for `http_exec`'s TSV-RPC.
//!
//! Cursors live in the HTTP connection ([`KtCursors`]), named by the client's `CUR` number, as
//! Kyoto Tycoon keeps them in its session: a number not seen before on the connection makes a
//! new cursor (nowhere, as Kyoto Tycoon's), and the connection's cursors go when it closes. A
//! connection holds at most [`MAX_CURSORS`]; a new one past that replaces the one used least
//! recently (clients such as `ukt` number every cursor anew and never delete one they ran to
//! the end, so a limit that refused would break them; Kyoto Tycoon has none).
//!
//! A cursor keeps the direction of its last jump or step, as Kyoto Cabinet's do: after
//! `cur_jump_back` or `cur_step_back`, `cur_get` / `cur_set_value` with `step` move to the
//! previous record, and `cur_remove` / `cur_seize` leave the cursor on the previous record
//! (nowhere when there is none); `cur_jump` and `cur_step` turn it forward again. On an
//! unordered kind, where the backward moves are refused, it always goes forward.
//!
//! Answers follow `ktserver.cc` 0.9.56: 200 done; 450 `DB: 7: no record: no record` when the
//! cursor is nowhere or runs off an end; 501 `DB: 1: not implemented: not implemented` for
//! `cur_jump_back` and `cur_step_back` on an unordered database (as Kyoto Cabinet's hash
//! database answers); 400 `no such cursor` without a numeric `CUR`, `invalid parameters`
//! without a required parameter.

use crate::context::Shared;
use crate::kt_common::{
    atoi, db_ok, fail, get, kt_expiry_param, set, Input, Output, Rv, NO_RECORD,
};
use crate::mask::{Op, Proto};
use kura_engine::{Cursor, Error, Record, Store};

/// Most cursors one connection holds (the least recently used one goes to make room).
pub const MAX_CURSORS: usize = 16;

/// A connection's cursors, by the client's number.
#[derive(Default)]
pub struct KtCursors<'s> {
    /// (number, last use, cursor); few enough to search in order.
    curs: Vec<(u64, u64, Box<dyn Cursor + 's>)>,
    clock: u64,
}

impl<'s> KtCursors<'s> {
    pub fn new() -> Self {
        KtCursors {
            curs: Vec::new(),
            clock: 0,
        }
    }

    /// How many cursors are held.
    pub fn len(&self) -> usize {
        self.curs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.curs.is_empty()
    }

    /// The cursor numbered `id`, made when new.
    fn cursor(&mut self, store: &'s dyn Store, id: u64) -> Result<&mut (dyn Cursor + 's), Error> {
        self.clock += 1;
        let clock = self.clock;
        let at = match self.curs.iter().position(|c| c.0 == id) {
            Some(i) => i,
            None => {
                let cur = store.cursor()?;
                if self.curs.len() >= MAX_CURSORS {
                    if let Some(lru) = (0..self.curs.len()).min_by_key(|&i| self.curs[i].1) {
                        self.curs.swap_remove(lru);
                    }
                }
                self.curs.push((id, clock, cur));
                self.curs.len() - 1
            }
        };
        let c = &mut self.curs[at];
        c.1 = clock;
        Ok(&mut *c.2)
    }

    fn delete(&mut self, id: u64) {
        self.curs.retain(|c| c.0 != id);
    }
}

/// The mask operation of a procedure of this module; `None`: not one of them.
fn op_of(name: &[u8]) -> Option<Option<Op>> {
    Some(match name {
        b"cur_jump" | b"cur_jump_back" => Some(Op::IterInit),
        b"cur_step" | b"cur_step_back" | b"cur_get" | b"cur_get_key" | b"cur_get_value" => {
            Some(Op::IterNext)
        }
        b"cur_set_value" => Some(Op::Put),
        b"cur_remove" | b"cur_seize" => Some(Op::Out),
        b"cur_delete" => None,
        b"match_similar" => Some(Op::Fwmkeys),
        _ => return None,
    })
}

/// Run `name` if it is one of this module's procedures (`None` otherwise).
pub fn procedure<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    curs: &mut KtCursors<'s>,
    name: &[u8],
    input: &Input<'_>,
    now: u64,
    out: &mut Output,
) -> Option<Result<Rv, Error>> {
    let op = op_of(name)?;
    if let Some(by_mask) = op.and_then(|op| shared.verdict(|mask| mask.denies(op, Proto::Http))) {
        let why = shared.read_only_refusal(by_mask);
        return Some(Ok(fail(
            out,
            403,
            why.unwrap_or_else(|| "forbidden".into()),
        )));
    }
    if !db_ok(input, shared) {
        return Some(Ok(fail(out, 400, "no such database")));
    }
    if name == b"match_similar" {
        return Some(match_similar(store, input, out));
    }
    // Kyoto Tycoon reads `CUR` only when it starts with a digit.
    let id = match get(input, "CUR") {
        Some(c) if c.first().is_some_and(u8::is_ascii_digit) => atoi(c) as u64,
        _ => return Some(Ok(fail(out, 400, "no such cursor"))),
    };
    if name == b"cur_delete" {
        curs.delete(id);
        return Some(Ok(200));
    }
    Some(run(store, curs, id, name, input, now, out))
}

/// Kyoto Cabinet's answer to an operation its kind does not have.
const NOT_IMPLEMENTED: &str = "DB: 1: not implemented: not implemented";

fn not_implemented(out: &mut Output) -> Rv {
    fail(out, 501, NOT_IMPLEMENTED)
}

fn run<'s>(
    store: &'s dyn Store,
    curs: &mut KtCursors<'s>,
    id: u64,
    name: &[u8],
    input: &Input<'_>,
    now: u64,
    out: &mut Output,
) -> Result<Rv, Error> {
    let step = get(input, "step").is_some();
    let key = get(input, "key");
    let cur = curs.cursor(store, id)?;
    let moved = match name {
        b"cur_jump" => match key {
            Some(k) => cur.jump(k),
            None => cur.first(),
        },
        b"cur_jump_back" => match key {
            Some(k) => cur.jump_back(k),
            None => cur.last(),
        },
        b"cur_step" => cur.step(),
        b"cur_step_back" => cur.step_back(),
        b"cur_remove" => cur.remove(),
        b"cur_set_value" => {
            let Some(value) = get(input, "value") else {
                return Ok(fail(out, 400, "invalid parameters"));
            };
            let expires = kt_expiry_param(get(input, "xt"), now);
            let done = cur.set_value(value, Some(expires))?;
            if done && step {
                step_on(cur)?;
            }
            Ok(done)
        }
        _ => {
            // cur_get, cur_get_key, cur_get_value, cur_seize: a record.
            let found = if name == b"cur_seize" {
                cur.seize()?
            } else {
                let found = cur.get()?;
                if found.is_some() && step {
                    step_on(cur)?;
                }
                found
            };
            let Some((k, r)) = found else {
                return Ok(fail(out, 450, NO_RECORD));
            };
            show(name, k, r, out);
            return Ok(200);
        }
    };
    Ok(match moved {
        Ok(true) => 200,
        Ok(false) => fail(out, 450, NO_RECORD),
        Err(Error::Unsupported(_)) => not_implemented(out),
        Err(e) => return Err(e),
    })
}

/// A `step` parameter's move: the way the cursor's last jump or step went, as Kyoto
/// Cabinet's cursors step after a visit (`cur_jump_back` then `cur_get step` walks down).
pub(crate) fn step_on(cur: &mut dyn Cursor) -> Result<bool, Error> {
    if cur.backward() {
        cur.step_back()
    } else {
        cur.step()
    }
}

/// The output of a read at the cursor.
fn show(name: &[u8], key: Vec<u8>, r: Record, out: &mut Output) {
    match name {
        b"cur_get_key" => set(out, "key", key),
        b"cur_get_value" => set(out, "value", r.value),
        _ => {
            set(out, "key", key);
            set(out, "value", r.value);
            if r.meta.expires != 0 {
                set(out, "xt", r.meta.expires.to_string());
            }
        }
    }
}

/// Longest `origin` of match_similar: its cost is the length of each key times this.
const MAX_ORIGIN: usize = 64 * 1024;

/// Kyoto Cabinet's match_similar: the keys within `range` (default 1) edits of `origin`, over
/// bytes, or over characters with `utf`; the `max` nearest (by distance, then key), nearest
/// first.
fn match_similar(store: &dyn Store, input: &Input<'_>, out: &mut Output) -> Result<Rv, Error> {
    let Some(origin) = get(input, "origin") else {
        return Ok(fail(out, 400, "invalid parameters"));
    };
    if origin.len() > MAX_ORIGIN {
        return Err(Error::TooLarge(format!(
            "origin of {} bytes (limit {MAX_ORIGIN})",
            origin.len()
        )));
    }
    let range = match get(input, "range").map(atoi) {
        Some(r) if r >= 0 => usize::try_from(r).unwrap_or(usize::MAX),
        _ => 1,
    };
    let utf = get(input, "utf").is_some();
    let max = match get(input, "max").map(atoi) {
        Some(m) if m >= 0 => usize::try_from(m).unwrap_or(usize::MAX),
        _ => usize::MAX,
    };
    let units = |b: &[u8]| -> Vec<u32> {
        if utf {
            String::from_utf8_lossy(b).chars().map(u32::from).collect()
        } else {
            b.iter().map(|&c| u32::from(c)).collect()
        }
    };
    let o = units(origin);
    // The `max` best so far, as a max-heap on (distance, key).
    let mut best: std::collections::BinaryHeap<(usize, Vec<u8>)> = Default::default();
    if max > 0 {
        let mut cur = store.cursor()?;
        while let Some((k, _)) = cur.next()? {
            let Some(d) = distance_within(&o, &units(&k), range) else {
                continue;
            };
            if best.len() < max {
                best.push((d, k));
            } else if best.peek().is_some_and(|top| (d, &k) < (top.0, &top.1)) {
                best.pop();
                best.push((d, k));
            }
        }
    }
    let keys = best.into_sorted_vec();
    set(out, "num", keys.len().to_string());
    for (i, (_, k)) in keys.into_iter().enumerate() {
        let mut name = Vec::with_capacity(k.len() + 1);
        name.push(b'_');
        name.extend_from_slice(&k);
        out.insert(name, i.to_string().into_bytes());
    }
    Ok(200)
}

/// The Levenshtein distance between `a` and `b` when it is at most `max`. Only the band of
/// the table within `max` of the diagonal is computed.
pub fn distance_within(a: &[u32], b: &[u32], max: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let (a, b) = if a.len() < b.len() { (b, a) } else { (a, b) };
    let inf = usize::MAX / 2;
    // prev[j]: the distance between a[..i] and b[..j].
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![inf; b.len() + 1];
    for i in 1..=a.len() {
        let lo = i.saturating_sub(max).max(1);
        let hi = (i + max).min(b.len());
        row.fill(inf);
        row[0] = if i <= max { i } else { inf };
        let mut least = row[0];
        for j in lo..=hi {
            let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            row[j] = sub.min(prev[j] + 1).min(row[j - 1] + 1);
            least = least.min(row[j]);
        }
        if least > max {
            return None;
        }
        std::mem::swap(&mut prev, &mut row);
    }
    Some(prev[b.len()]).filter(|&d| d <= max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(a: &[u32], b: &[u32]) -> usize {
        let mut d: Vec<Vec<usize>> = (0..=a.len())
            .map(|i| {
                (0..=b.len())
                    .map(|j| {
                        if i == 0 {
                            j
                        } else if j == 0 {
                            i
                        } else {
                            0
                        }
                    })
                    .collect()
            })
            .collect();
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                d[i][j] = (d[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]))
                    .min(d[i - 1][j] + 1)
                    .min(d[i][j - 1] + 1);
            }
        }
        d[a.len()][b.len()]
    }

    #[test]
    fn the_banded_distance_agrees_with_the_whole_table() {
        let words: Vec<Vec<u32>> = [
            "", "a", "ab", "ba", "abc", "kitten", "sitting", "saturday", "sunday", "aaaa", "abab",
        ]
        .iter()
        .map(|w| w.bytes().map(u32::from).collect())
        .collect();
        for a in &words {
            for b in &words {
                let d = brute(a, b);
                for max in 0..8 {
                    assert_eq!(
                        distance_within(a, b, max),
                        (d <= max).then_some(d),
                        "{a:?} {b:?} {max}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_connection_keeps_at_most_max_cursors() {
        let db = kura_engine::open("*").unwrap();
        db.put(b"a", b"1").unwrap();
        let mut c = KtCursors::new();
        for id in 0..(MAX_CURSORS as u64 + 5) {
            assert!(c.cursor(&*db, id).unwrap().first().unwrap());
            // Cursor 0 stays in use, so it is never the one to go.
            assert!(c.cursor(&*db, 0).unwrap().get().unwrap().is_some());
        }
        assert_eq!(c.len(), MAX_CURSORS);
        assert!(c.curs.iter().any(|e| e.0 == 0));
        assert!(
            !c.curs.iter().any(|e| e.0 == 1),
            "the least recently used went"
        );
        c.delete(0);
        assert_eq!(c.len(), MAX_CURSORS - 1);
    }
}
