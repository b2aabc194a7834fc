//! A connection's pending output: the encoded replies, with stored values queued between them by
//! reference ([`Pinned`], straight from a segment's mapping) rather than copied in. The lot goes
//! to the socket with `writev`.

use kura_engine::Pinned;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};

/// Values at least this large are queued by reference; smaller ones are cheaper to copy.
pub const PIN_MIN: usize = 16 << 10;

/// Slices handed to one `writev`.
const MAX_IOV: usize = 64;

/// Pending output. Dereferences to the byte buffer the encoders append to.
#[derive(Default)]
pub struct Out {
    buf: Vec<u8>,
    /// Values to send after `buf[..at]`, in the order of `at`.
    pins: VecDeque<(usize, Pinned)>,
    /// Bytes of `buf` written.
    pos: usize,
    /// Bytes of the first queued value written.
    pin_pos: usize,
    /// Bytes of queued values not yet written.
    pinned: usize,
}

impl std::ops::Deref for Out {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.buf
    }
}

impl std::ops::DerefMut for Out {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
}

impl Out {
    /// Queue `value` after what the buffer holds now.
    pub fn push_pinned(&mut self, value: Pinned) {
        if value.is_empty() {
            return;
        }
        self.pinned += value.len();
        self.pins.push_back((self.buf.len(), value));
    }

    /// Bytes not yet written.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos + self.pinned
    }

    pub fn is_drained(&self) -> bool {
        self.pending() == 0
    }

    /// Everything not yet written, in one buffer (for tests and tools, not the hot path).
    pub fn contiguous(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.pending());
        let mut cur = self.pos;
        for (i, (at, p)) in self.pins.iter().enumerate() {
            v.extend_from_slice(&self.buf[cur..*at]);
            let skip = if i == 0 { self.pin_pos } else { 0 };
            v.extend_from_slice(&p.bytes()[skip..]);
            cur = *at;
        }
        v.extend_from_slice(&self.buf[cur..]);
        v
    }

    /// Write until everything is out (`Ok(true)`) or the writer would block (`Ok(false)`).
    pub fn write_to(&mut self, w: &mut impl Write) -> io::Result<bool> {
        loop {
            if self.is_drained() {
                self.buf.clear();
                self.pos = 0;
                self.pins.clear();
                return Ok(true);
            }
            let n = {
                let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
                let mut k = 0;
                let mut cur = self.pos;
                let mut all = true;
                for (i, (at, p)) in self.pins.iter().enumerate() {
                    if k + 2 > MAX_IOV {
                        all = false;
                        break;
                    }
                    if cur < *at {
                        iov[k] = IoSlice::new(&self.buf[cur..*at]);
                        k += 1;
                        cur = *at;
                    }
                    let skip = if i == 0 { self.pin_pos } else { 0 };
                    iov[k] = IoSlice::new(&p.bytes()[skip..]);
                    k += 1;
                }
                if all && cur < self.buf.len() && k < MAX_IOV {
                    iov[k] = IoSlice::new(&self.buf[cur..]);
                    k += 1;
                }
                match w.write_vectored(&iov[..k]) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            self.advance(n);
        }
    }

    /// Account for `n` bytes written, in stream order.
    fn advance(&mut self, mut n: usize) {
        loop {
            match self.pins.front() {
                Some((at, p)) if self.pos == *at => {
                    let k = n.min(p.len() - self.pin_pos);
                    self.pin_pos += k;
                    self.pinned -= k;
                    n -= k;
                    if self.pin_pos < p.len() {
                        return; // n is 0
                    }
                    self.pins.pop_front();
                    self.pin_pos = 0;
                }
                Some((at, _)) => {
                    let k = n.min(*at - self.pos);
                    self.pos += k;
                    n -= k;
                    if n == 0 {
                        return;
                    }
                }
                None => {
                    self.pos += n;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A writer that takes at most `max` bytes per call and says "would block" every
    /// `block_every` calls.
    struct Trickle {
        got: Vec<u8>,
        max: usize,
        calls: usize,
        block_every: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(b)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(self.block_every) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(self.max - n);
                self.got.extend_from_slice(&b[..k]);
                n += k;
                if n == self.max {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn pinned(bytes: &[u8]) -> Pinned {
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(bytes.to_vec());
        Pinned::new(owner, 0, bytes.len()).unwrap()
    }

    proptest::proptest! {
        /// Whatever the mix of buffered bytes and queued values, and however the socket takes
        /// them, the stream written is the one encoded, in order.
        #[test]
        fn writes_everything_in_order(
            parts in proptest::collection::vec(
                (proptest::bool::ANY, proptest::collection::vec(proptest::num::u8::ANY, 0..300)),
                0..120,
            ),
            max in 1usize..700,
            block_every in 2usize..9,
        ) {
            let mut out = Out::default();
            let mut want = Vec::new();
            for (pin, bytes) in &parts {
                if *pin {
                    out.push_pinned(pinned(bytes));
                } else {
                    out.extend_from_slice(bytes);
                }
                want.extend_from_slice(bytes);
            }
            proptest::prop_assert_eq!(out.pending(), want.len());
            proptest::prop_assert_eq!(&out.contiguous(), &want);
            let mut w = Trickle { got: Vec::new(), max, calls: 0, block_every };
            let mut rounds = 0;
            while !out.write_to(&mut w).unwrap() {
                rounds += 1;
                proptest::prop_assert!(rounds < 100_000);
            }
            proptest::prop_assert_eq!(&w.got, &want);
            proptest::prop_assert!(out.is_drained());
            proptest::prop_assert_eq!(out.len(), 0);
        }
    }
}
