//! Kura's protocol codecs: pure functions from bytes to requests and from replies to bytes, with
//! no sockets, no runtime and no storage (see docs/ARCHITECTURE.md).
//!
//! The memcached text protocol (`mc_text`, classic and meta commands), the memcached binary
//! protocol (`mc_bin`), the Tokyo Tyrant binary protocol (`tt_bin`, both directions), HTTP/1.1
//! (`http`), Kyoto Tycoon's TSV bodies (`kt_tsv`) and its binary protocol (`kt_bin`), and the
//! replication streams of Tokyo Tyrant (`repl_tt`) and Kyoto Tycoon (`repl_kt`), and the Redis
//! protocol, RESP2 and RESP3 (`resp`).

pub mod http;
pub mod kt_bin;
pub mod kt_tsv;
pub mod mc_bin;
pub mod mc_num;
pub mod mc_text;
pub mod repl;
pub mod repl_kt;
pub mod repl_tt;
pub mod resp;
pub mod tt_bin;

/// The result of decoding the start of a buffer, shared by the codecs whose decoders either
/// return a whole request or ask for more bytes (HTTP adds a third case, its own type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded<T> {
    /// A whole request, and how many bytes it took.
    Complete { request: T, consumed: usize },
    /// More bytes are needed.
    Incomplete,
}

/// The result of decoding the start of a buffer of replies (the client side of `tt_bin` and
/// `kt_bin`): a whole reply, or a need for more bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodedReply<R> {
    /// A whole reply, and how many bytes it took.
    Complete { reply: R, consumed: usize },
    /// More bytes are needed.
    Incomplete,
}

/// Append `n` in decimal ASCII (every text protocol's numbers).
pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}
