//! The wire adapters: each protocol's codec and executor as the connection loop drives them
//! ([`Wire`]), and [`process`], which runs the requests in a connection's buffer.

use super::*;
use crate::auth::{shown, HttpRefusal, Session, Users};
use crate::context::{Next, Shared};
use crate::kt_cursor::KtCursors;
use crate::kt_signal::Waited;
use crate::mask::{Mask, Op, Proto};
use crate::mc_stats::Dump;
use crate::metrics::Histogram;
use crate::out::Out;
use crate::tt_exec::{self, TtState};
use crate::{http_exec, kt_bin_exec, mc_bin_exec};
use crate::{mc_common, mc_exec};
use kura_engine::store::now_secs;
use kura_engine::Store;
use kura_proto::mc_text::{self, Decoded, GetLine, Limits};
use kura_proto::{http, kt_bin, mc_bin, resp, tt_bin};
use std::time::Instant;

/// Decode and execute every complete request in the read buffer.
pub(super) fn process<'s>(
    c: &mut Conn<'s>,
    store: &'s dyn Store,
    shared: &Shared,
    limits: &AllLimits,
) {
    let mut pos = 0;
    if !skip_owed(c, &mut pos) {
        // More of a refused request is owed (its bytes, or a size split across reads):
        // nothing after it can be decoded yet.
        c.rbuf.drain(..pos);
        return;
    }
    if c.discard_line {
        match c.rbuf[pos..].iter().position(|&b| b == b'\n') {
            Some(nl) => {
                pos += nl + 1;
                c.discard_line = false;
            }
            None => pos = c.rbuf.len(),
        }
    }
    if c.proto.is_none() && pos < c.rbuf.len() {
        let mut p = sniff(c.rbuf[pos], c.mc_only);
        if p == Protocol::Http {
            // HTTP's request line or a Redis inline command: told by the whole line.
            let line = &c.rbuf[pos..];
            if !line.contains(&b'\n') && line.len() < SNIFF_LINE_MAX && !c.eof {
                return;
            }
            p = sniff_line(&line[..line.len().min(SNIFF_LINE_MAX)]);
        }
        c.proto = Some(p);
        if matches!(p, Protocol::TokyoTyrant | Protocol::KyotoBinary) {
            // The handshake is over by the first decrypted byte: the client's verified
            // certificate names its user.
            if c.session.tls_client.is_none() {
                c.session.tls_client = c
                    .tls_info()
                    .and_then(|i| i.client_cert_subject)
                    .map(|s| crate::auth::cert_user(&s));
            }
            match shared.access.binary(&c.session) {
                Ok(user) => c.session.user = user,
                Err(why) => {
                    shared.log.limited(
                        "refused binary",
                        &format!(
                            "refused a connection from {} ({p:?}): {why}",
                            c.session.peer
                        ),
                    );
                    c.closing = true;
                    c.rbuf.clear();
                    return;
                }
            }
        }
        if p == Protocol::Redis {
            c.redis = Some(Box::new(crate::redis_exec::RedisConn::new(
                shared,
                now_secs(),
            )));
        }
        if p == Protocol::TokyoTyrant {
            let mut st = TtState::of_server(shared);
            st.fd = std::os::fd::AsRawFd::as_raw_fd(&c.sock);
            c.tt = Some(Box::new(st));
        }
    }
    let now = now_secs();
    let at = Ctx { store, shared, now };
    let lat = &shared.latency.0;
    // The rights of the connection's user hold for its requests (HTTP: set per request).
    crate::auth::run_as(c.session.user.as_ref().map_or(Mask::NONE, |u| u.1));
    match c.proto {
        Some(Protocol::MemcachedBinary) => {
            let mut session = std::mem::take(&mut c.session);
            drive(c, pos, &mut McBinary(at, &limits.mc, &mut session), &lat[1]);
            c.session = session;
        }
        Some(Protocol::TokyoTyrant) => {
            // The iterator state leaves the connection while the loop borrows it.
            let Some(mut st) = c.tt.take() else { return };
            drive(c, pos, &mut Tyrant(store, at, &limits.tt, &mut st), &lat[2]);
            c.tt = Some(st);
        }
        Some(Protocol::KyotoBinary) => drive(c, pos, &mut KyotoBinary(at, &limits.kt), &lat[3]),
        Some(Protocol::Redis) => {
            // The connection's state leaves it while the loop borrows it.
            let Some(mut st) = c.redis.take() else { return };
            let mut session = std::mem::take(&mut c.session);
            let mut w = Redis(store, at, &limits.redis, &mut st, &mut session);
            drive(c, pos, &mut w, &lat[5]);
            c.session = session;
            c.redis = Some(st);
        }
        Some(Protocol::Http) => {
            // The cursors leave the connection while the loop borrows it.
            let mut curs = c.kt.take().unwrap_or_default();
            let mut waited = c.waited.take();
            let session = std::mem::take(&mut c.session);
            drive(
                c,
                pos,
                &mut Http(store, at, &limits.http, &mut curs, &mut waited, &session),
                &lat[4],
            );
            c.session = session;
            c.kt = Some(curs);
        }
        Some(Protocol::MemcachedText) | None => {
            let mut session = std::mem::take(&mut c.session);
            let mut w = McText {
                at,
                limits: &limits.mc,
                more: c.more.take(),
                session: &mut session,
            };
            let mut pos = pos;
            loop {
                drive(c, pos, &mut w, &lat[0]);
                let Some(all) = c.want_dump.take() else { break };
                match Dump::start(store, shared, all, now) {
                    Ok(d) => {
                        c.dump = Some(d);
                        pump(c, shared);
                    }
                    Err(e) => mc_common::server_error(&mut c.out, &e),
                }
                if c.dump.is_some() {
                    break;
                }
                // A dump written out whole: on with the requests behind it.
                pos = 0;
            }
            c.more = w.more;
            c.session = session;
        }
    }
    crate::auth::run_as(Mask::NONE);
}

/// Discard from `pos` on what a refused request left to discard ([`Conn::skip`], then
/// [`Conn::skip_elements`]), as far as it has arrived; whether all of it has (when not, `pos`
/// is where the next read's bytes continue it: an element's size may be split across reads).
pub(super) fn skip_owed(c: &mut Conn<'_>, pos: &mut usize) -> bool {
    loop {
        let n = c.skip.min(c.rbuf.len() - *pos);
        *pos += n;
        c.skip -= n;
        if c.skip > 0 {
            return false;
        }
        if c.skip_elements == 0 {
            return true;
        }
        let Some(size) = c.rbuf.get(*pos..*pos + 4) else {
            return false;
        };
        c.skip = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
        c.skip_elements -= 1;
        *pos += 4;
    }
}

/// What decoding the start of the buffer found.
pub(super) enum Step<R> {
    /// A whole request and the bytes it takes.
    Request(R, usize),
    /// More bytes are needed (anything to send meanwhile is already in the output).
    More,
    /// A request that is refused: its error reply is written; skip `consumed` bytes (also
    /// those not received yet), then through the next newline if `discard_line`, and close
    /// the connection if `close`.
    Refused {
        consumed: usize,
        close: bool,
        discard_line: bool,
        /// Then discard this many `[size:4][bytes]` elements (Tyrant lists).
        elements: usize,
    },
}

/// One protocol as the connection loop drives it: its codec and its executor.
pub(super) trait Wire {
    type Req<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>>;
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next;
}

/// What every executor gets.
#[derive(Clone, Copy)]
pub(super) struct Ctx<'x> {
    pub(super) store: &'x dyn Store,
    pub(super) shared: &'x Shared,
    pub(super) now: u64,
}

/// Decode and execute the requests from `pos` on, then drop what was consumed. The time of
/// the whole batch (decoding included), shared evenly by its requests, goes to the protocol's
/// latency histogram: two clock reads a batch, whatever the number of pipelined requests
/// (one read a request cost 3.5 % of the server's CPU a pipelined request).
pub(super) fn drive<W: Wire>(c: &mut Conn<'_>, pos: usize, w: &mut W, lat: &Histogram) {
    let start = Instant::now();
    let n = drive_batch(c, pos, w);
    if n > 0 {
        lat.observe_n(start.elapsed(), n);
    }
}

/// [`drive`]'s loop; the number of requests executed.
fn drive_batch<W: Wire>(c: &mut Conn<'_>, mut pos: usize, w: &mut W) -> u64 {
    let mut n = 0;
    while pos < c.rbuf.len() && !c.closing {
        let (consumed, close, discard_line, elements) = match w.decode(&c.rbuf[pos..], &mut c.out) {
            Step::Request(req, consumed) => {
                let next = w.execute(&req, &mut c.out);
                n += 1;
                if let Next::Wait(wait) = next {
                    // Unanswered: the request stays in the buffer until its wait ends.
                    c.want_wait = Some(wait);
                    break;
                }
                pos += consumed;
                match next {
                    Next::Continue => continue,
                    Next::Close => c.closing = true,
                    Next::Dump(all) => {
                        // Nothing more is read until the dump is out.
                        c.want_dump = Some(all);
                        break;
                    }
                    Next::Stream(req) => {
                        // Nothing more is read here: the stream's thread takes the socket.
                        c.want_stream = Some(req);
                        break;
                    }
                    Next::Wait(_) => unreachable!("handled above"),
                }
                continue;
            }
            Step::More => break,
            Step::Refused {
                consumed,
                close,
                discard_line,
                elements,
            } => (consumed, close, discard_line, elements),
        };
        if close {
            c.closing = true;
        }
        let avail = c.rbuf.len() - pos;
        if consumed > avail || elements > 0 {
            c.skip = consumed;
            c.skip_elements = elements;
            if !skip_owed(c, &mut pos) {
                break;
            }
        } else {
            pos += consumed;
            if discard_line {
                match c.rbuf[pos..].iter().position(|&b| b == b'\n') {
                    Some(nl) => pos += nl + 1,
                    None => {
                        pos = c.rbuf.len();
                        c.discard_line = true;
                    }
                }
            }
        }
    }
    c.rbuf.drain(..pos.min(c.rbuf.len()));
    n
}

pub(super) struct McText<'x> {
    pub(super) at: Ctx<'x>,
    pub(super) limits: &'x Limits,
    /// The long retrieval line whose next piece is due.
    pub(super) more: Option<GetLine>,
    /// Who the connection has logged in as (with `--users`).
    pub(super) session: &'x mut Session,
}

impl Wire for McText<'_> {
    type Req<'a> = mc_text::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        let decoded = match self.more {
            Some(line) => mc_text::decode_continued(buf, self.limits, line),
            None => mc_text::decode(buf, self.limits),
        };
        match decoded {
            Ok(Decoded::Complete { request, consumed }) => {
                self.more = mc_text::continues(&request);
                Step::Request(request, consumed)
            }
            Ok(Decoded::Incomplete) => Step::More,
            Err(e) => {
                self.more = None;
                let Ctx { store, shared, .. } = self.at;
                if let Some(u) = e.unlink.filter(|_| may_unlink(shared, self.session)) {
                    let key = &buf[u.start..u.start + u.len];
                    if let Err(err) = mc_exec::unlink_key(store, shared, key, u.base64) {
                        mc_common::server_error(out, &err);
                    }
                } else if e.kind == mc_text::ErrorKind::TooLarge {
                    shared.mc.store_too_large.add(1);
                }
                if let Some(n) = e.value_len {
                    mc_refused(shared, "memcached text", n);
                }
                e.encode(out);
                Step::Refused {
                    consumed: e.consumed,
                    close: e.close,
                    discard_line: e.discard_line,
                    elements: 0,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { store, shared, now } = self.at;
        if shared.access.has_users() && self.session.user.is_none() {
            if let Some(users) = shared.access.users() {
                mc_text_login(&users, shared, self.session, req, out);
                return Next::Continue;
            }
        }
        mc_exec::execute(store, shared, req, now, out)
    }
}

/// Log a memcached storage command refused as too large (its data is skipped, and
/// memcached's own reply sent): over `--max-value-size`, or an item over `--max-item-size`.
pub(super) fn mc_refused(shared: &Shared, what: &str, value_len: u64) {
    if value_len > shared.max_value_size {
        shared.value_refused(what, value_len);
    } else {
        shared.log.limited(
            "item too large",
            &format!(
                "refused ({what}): a value of {value_len} bytes makes an item over the \
                 server's --max-item-size {}",
                shared.max_item_size
            ),
        );
    }
}

/// memcached's text-protocol authentication (its `-Y`): before a login, the data of a `set`
/// is `NAME PASSWORD`; every other command is refused.
fn mc_text_login(
    users: &Users,
    shared: &Shared,
    session: &mut Session,
    req: &mc_text::Request<'_>,
    out: &mut Out,
) {
    let mc_text::Request::Store {
        mode: mc_text::StoreMode::Set,
        data,
        ..
    } = req
    else {
        out.extend_from_slice(b"CLIENT_ERROR unauthenticated\r\n");
        return;
    };
    let Some(sp) = data.iter().position(|&b| b == b' ') else {
        out.extend_from_slice(b"CLIENT_ERROR bad authentication token format\r\n");
        return;
    };
    let (name, pass) = (&data[..sp], &data[sp + 1..]);
    match users.login(name, pass) {
        Some(u) => {
            session.user = Some((u.name.clone(), u.denied));
            crate::auth::run_as(u.denied);
            out.extend_from_slice(b"STORED\r\n");
        }
        None => {
            login_failed(shared, session, "memcached text", Some(shown(name)));
            out.extend_from_slice(b"CLIENT_ERROR authentication failure\r\n");
        }
    }
}

/// Whether a memcached storage command refused as too large may remove the key's old item
/// (as memcached does): not before a login, nor when the mask in force (with the user's
/// rights) refuses a `put`.
fn may_unlink(shared: &Shared, session: &Session) -> bool {
    (!shared.access.has_users() || session.user.is_some())
        && !shared.mask().denies(Op::Put, Proto::Memcached)
}

/// Log a failed login (never its secret).
pub(crate) fn login_failed(shared: &Shared, session: &Session, what: &str, name: Option<String>) {
    let who = name.map_or_else(
        || "a token or unreadable credentials".into(),
        |n| format!("user {n}"),
    );
    shared.log.limited(
        "failed login",
        &format!(
            "refused a login from {} ({what}): {who}: wrong name or password",
            session.peer
        ),
    );
}

pub(super) struct McBinary<'x>(
    pub(super) Ctx<'x>,
    pub(super) &'x Limits,
    /// Who the connection has logged in as (SASL, with `--users`).
    pub(super) &'x mut Session,
);

impl Wire for McBinary<'_> {
    type Req<'a> = mc_bin::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        match mc_bin::decode(buf, self.1) {
            Ok(mc_bin::Decoded::Complete { request, consumed }) => Step::Request(request, consumed),
            Ok(mc_bin::Decoded::Incomplete) => Step::More,
            Err(e) => {
                let Ctx { store, shared, .. } = self.0;
                if let Some((start, len)) = e.unlink.filter(|_| may_unlink(shared, self.2)) {
                    if let Err(err) =
                        mc_exec::unlink_key(store, shared, &buf[start..start + len], false)
                    {
                        mc_bin::encode_error(
                            out,
                            e.opcode,
                            mc_bin::status::OUT_OF_MEMORY,
                            e.opaque,
                        );
                        let _ = err;
                    }
                } else if e.status == Some(mc_bin::status::TOO_LARGE) {
                    shared.mc.store_too_large.add(1);
                }
                if let Some(n) = e.value_len {
                    mc_refused(shared, "memcached binary", n);
                }
                if let Some(st) = e.status {
                    mc_bin::encode_error(out, e.opcode, st, e.opaque);
                }
                Step::Refused {
                    consumed: e.consumed,
                    close: e.close,
                    discard_line: false,
                    elements: 0,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { store, shared, now } = self.0;
        if let Some(users) = shared.access.users() {
            if mc_sasl(&users, shared, self.2, req, out) {
                return Next::Continue;
            }
        }
        mc_bin_exec::execute(store, shared, req, now, out)
    }
}

/// memcached's SASL (its `-S`), PLAIN only: the SASL requests, and the refusal (status "Auth
/// error") of every other request but `version` before a login. True when `req` was answered.
fn mc_sasl(
    users: &Users,
    shared: &Shared,
    session: &mut Session,
    req: &mc_bin::Request<'_>,
    out: &mut Out,
) -> bool {
    use mc_bin::{encode_error, encode_response, op, status};
    let (opc, opaque) = (req.opcode, req.opaque);
    match opc {
        op::SASL_LIST_MECHS => {
            encode_response(out, opc, status::OK, opaque, 0, &[], &[], b"PLAIN");
        }
        op::SASL_AUTH => {
            let plain = (req.key == b"PLAIN")
                .then(|| mc_bin::sasl_plain(req.value))
                .flatten();
            let user = plain.and_then(|(name, pass)| users.login(name, pass));
            match user {
                Some(u) => {
                    session.user = Some((u.name.clone(), u.denied));
                    crate::auth::run_as(u.denied);
                    encode_response(out, opc, status::OK, opaque, 0, &[], &[], b"Authenticated");
                }
                None => {
                    session.user = None;
                    crate::auth::run_as(Mask::NONE);
                    let name = plain.map(|(n, _)| shown(n));
                    login_failed(shared, session, "memcached SASL", name);
                    encode_error(out, opc, status::AUTH_ERROR, opaque);
                }
            }
        }
        // PLAIN takes one step: a further one is refused.
        op::SASL_STEP => encode_error(out, opc, status::AUTH_ERROR, opaque),
        op::VERSION => return false,
        _ if session.user.is_none() => encode_error(out, opc, status::AUTH_ERROR, opaque),
        _ => return false,
    }
    true
}

/// The store again with its own lifetime: the connection's iterator borrows it for that long.
pub(super) struct Tyrant<'x, 's>(
    &'s dyn Store,
    Ctx<'x>,
    &'x tt_bin::Limits,
    &'x mut TtState<'s>,
);

impl Wire for Tyrant<'_, '_> {
    type Req<'a> = tt_bin::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        match tt_bin::decode(buf, self.2) {
            Ok(tt_bin::Decoded::Complete { request, consumed }) => Step::Request(request, consumed),
            Ok(tt_bin::Decoded::Incomplete) => Step::More,
            Err(e) => {
                let c = buf.get(1).copied().unwrap_or_default();
                if e.reply.is_some() {
                    tt_bin::reply_failure(out, c);
                }
                if let Some(n) = e.value_len {
                    let what = format!("Tyrant {}", tt_bin::cmd_name(c).unwrap_or("request"));
                    let why = self.1.shared.value_refused(&what, n);
                    self.3.last_error = Some(why.to_string());
                }
                Step::Refused {
                    consumed: e.consumed,
                    close: e.close,
                    discard_line: false,
                    elements: e.then_elements,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { shared, now, .. } = self.1;
        tt_exec::execute(self.0, shared, self.3, req, now, out)
    }
}

pub(super) struct KyotoBinary<'x>(pub(super) Ctx<'x>, pub(super) &'x kt_bin::Limits);

impl Wire for KyotoBinary<'_> {
    type Req<'a> = kt_bin::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        match kt_bin::decode(buf, self.1) {
            Ok(kt_bin::Decoded::Complete { request, consumed }) => Step::Request(request, consumed),
            Ok(kt_bin::Decoded::Incomplete) => Step::More,
            Err(e) => {
                // No error of this protocol leaves the stream readable: answer, then close.
                if let Some(n) = e.value_len {
                    self.0.shared.value_refused("Kyoto Tycoon binary", n);
                }
                kt_bin::reply_error(out);
                Step::Refused {
                    consumed: e.consumed,
                    close: true,
                    discard_line: false,
                    elements: 0,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { store, shared, now } = self.0;
        kt_bin_exec::execute(store, shared, req, now, out)
    }
}

/// The store again with its own lifetime: the connection's cursors borrow it for that long.
pub(super) struct Http<'x, 's>(
    &'s dyn Store,
    Ctx<'x>,
    &'x http::Limits,
    &'x mut KtCursors<'s>,
    /// How the wait of the first request ended (it ran before and waited).
    &'x mut Option<Waited>,
    /// The connection's peer, for the log.
    &'x Session,
);

impl Wire for Http<'_, '_> {
    type Req<'a> = http::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        match http::decode(buf, self.2) {
            Ok(http::Decoded::Complete { request, consumed }) => Step::Request(request, consumed),
            Ok(http::Decoded::Incomplete) => Step::More,
            Ok(http::Decoded::Continue) => {
                // `Expect: 100-continue`: the client waits for this before sending the body.
                out.extend_from_slice(http::CONTINUE);
                Step::More
            }
            Err(e) => {
                e.write(out);
                Step::Refused {
                    consumed: e.consumed,
                    close: e.close,
                    discard_line: false,
                    elements: 0,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { shared, now, .. } = self.1;
        if let Some(users) = shared.access.users() {
            match crate::auth::http_login(&users, req.header("Authorization")) {
                Ok(u) => crate::auth::run_as(u.denied),
                Err(why) => {
                    if let HttpRefusal::Wrong(name) = why {
                        login_failed(shared, self.5, "HTTP", name);
                    }
                    return http_exec::unauthorized(req, now, out);
                }
            }
        }
        http_exec::execute_with(self.0, shared, self.3, req, self.4.take(), now, out)
    }
}

/// The store again with its own lifetime: the connection's SCAN cursors borrow it that long.
pub(super) struct Redis<'x, 's>(
    &'s dyn Store,
    Ctx<'x>,
    &'x resp::Limits,
    &'x mut crate::redis_exec::RedisConn<'s>,
    /// Who the connection has logged in as (AUTH, with `--users`).
    &'x mut Session,
);

impl Wire for Redis<'_, '_> {
    type Req<'a> = resp::Request<'a>;
    fn decode<'a>(&mut self, buf: &'a [u8], out: &mut Vec<u8>) -> Step<Self::Req<'a>> {
        match resp::decode(buf, self.2) {
            Ok(Decoded::Complete { request, consumed }) => Step::Request(request, consumed),
            Ok(Decoded::Incomplete) => Step::More,
            Err(e) => {
                // A protocol error: answered, then the connection is closed, as Redis does.
                if let Some(n) = e.bulk_len {
                    self.1.shared.value_refused("Redis", n);
                }
                e.encode(out);
                Step::Refused {
                    consumed: buf.len(),
                    close: true,
                    discard_line: false,
                    elements: 0,
                }
            }
        }
    }
    fn execute(&mut self, req: &Self::Req<'_>, out: &mut Out) -> Next {
        let Ctx { shared, now, .. } = self.1;
        crate::redis_exec::execute(self.0, shared, self.3, self.4, req, now, out)
    }
}
