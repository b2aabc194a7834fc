//! Executes HTTP requests on a [`Store`]: Kyoto Tycoon's TSV-RPC under `/rpc/`, and one REST
//! interface for every other path that speaks both Tokyo Tyrant's and Kyoto Tycoon's headers.
//! No sockets here: the connection loop decodes with [`kura_proto::http::decode`] and writes
//! what [`execute`] appends.
//!
//! `rpc` holds the procedures, `rest` the REST methods and OPTIONS; here are the dispatch, the
//! response writer and what both share (Kyoto Cabinet's number parsing and error texts).
//!
//! # REST: one handler, two dialects
//!
//! The key is the percent-decoded path after its leading `/` (the query is not part of it).
//! Tokyo Tyrant 1.1.41 and Kyoto Tycoon agree on GET, HEAD and PUT (201) and on the 404s;
//! they differ on details that a request tells apart by its headers:
//!
//! * PUT reads `X-TT-PDMODE` (1 putkeep → 409 when the key exists, 2 putcat) and Kyoto
//!   Tycoon's `X-Kt-Mode` (`add` / `replace` → 450 when they fail) and `X-Kt-Xt` (absolute
//!   expiration: unix seconds or a date);
//! * DELETE answers Tyrant's `200 OK` unless the request carries an `X-Kt-*` header (and no
//!   `X-TT-*` one): then Kyoto Tycoon's `204 No Content`. Kyoto Tycoon REST clients that send
//!   no such header get Tyrant's 200 (see docs/PROTOCOL-HTTP.md);
//! * GET and HEAD add `X-Kt-Xt` when the record expires; misses carry both Tyrant's body and
//!   Kyoto Tycoon's `X-Kt-Error` header;
//! * `GET /metrics` is the server's Prometheus metrics ([`crate::metrics`]), not the record
//!   `metrics` (reach that through `/rpc/get` or another protocol);
//! * POST is Tyrant's: `X-TT-XNAME` (a function of the `--ext` script, `crate::script::tt`;
//!   500 on failure, as ttserver, with the reason in the body) or `X-TT-MNAME` (a `misc`
//!   function with form-encoded arguments); OPTIONS is Tyrant's server description.
//!
//! # Numbers and expiration in Kyoto Tycoon's format
//!
//! `/rpc/increment` keeps Kyoto Tycoon's 8-byte big-endian integer and `/rpc/increment_double`
//! its 16-byte fixed-point number (integral part and fraction × 10^15, both big-endian), not
//! Tyrant's little-endian `addint` / `adddouble` formats: a record incremented through one
//! protocol is not numeric for the other, exactly as between the original servers. The
//! procedures that change a record (append, increment, increment_double, cas, seize) map onto
//! the `Store` operations with Kyoto Cabinet's meaning of the same names.
//!
//! Kyoto Tycoon's `xt` is relative seconds when positive and an absolute unix time when
//! negative; results at or beyond 2^40 − 1 mean "never", like Kyoto Tycoon's cap. Every KT
//! write without `xt` stores a record that never expires (Kyoto Tycoon's default), except
//! REST PUT with Tyrant's putcat, which keeps the record's expiration.

use crate::context::{self, Next, Shared};
use crate::kt_common::{atoi, db_error, NO_RECORD};
use crate::kt_cursor::KtCursors;
use crate::kt_signal::Waited;
use kura_engine::counter::Counter;
use kura_engine::{Error, Store};
use kura_proto::http::{self, Method, Request};

mod query;
mod rest;
pub(crate) mod rpc;

/// The Kyoto Tycoon release whose RPC interface is served (reported by `/rpc/report`).
pub const KT_VERSION: &str = "0.9.56";

/// A response being built.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, Vec<u8>)>,
    body: Vec<u8>,
}

impl Reply {
    fn new(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Tyrant's style: a `text/plain` body of one line.
    fn text(status: u16, line: &str) -> Reply {
        let mut body = Vec::with_capacity(line.len() + 1);
        body.extend_from_slice(line.as_bytes());
        body.push(b'\n');
        Reply {
            status,
            headers: vec![("Content-Type", b"text/plain".to_vec())],
            body,
        }
    }

    fn header(mut self, name: &'static str, value: impl Into<Vec<u8>>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }
}

/// Execute one request, appending its response to `out`. [`Next::Close`] when the request
/// did not ask to keep the connection. Kyoto Tycoon's cursors live only for this request.
pub fn execute(
    store: &dyn Store,
    shared: &Shared,
    req: &Request<'_>,
    now: u64,
    out: &mut Vec<u8>,
) -> Next {
    execute_with(store, shared, &mut KtCursors::new(), req, None, now, out)
}

/// [`execute`] on a connection that keeps Kyoto Tycoon's cursors in `curs`. A request with
/// Kyoto Tycoon's `WAIT` answers nothing the first time ([`Next::Wait`]: the connection
/// parks it); it runs again with `waited` saying how its wait ended.
pub fn execute_with<'s>(
    store: &'s dyn Store,
    shared: &Shared,
    curs: &mut KtCursors<'s>,
    req: &Request<'_>,
    waited: Option<Waited>,
    now: u64,
    out: &mut Vec<u8>,
) -> Next {
    let mut e = Http {
        store,
        shared,
        curs,
        waited,
        now,
    };
    context::execute(&mut e, store, shared, req, now, out)
}

/// Answer a request that did not authenticate (missing or wrong credentials while the server
/// has users): 401 with the schemes accepted, HTTP Basic and bearer tokens.
pub fn unauthorized(req: &Request<'_>, now: u64, out: &mut Vec<u8>) -> Next {
    let reply = Reply::text(401, "Unauthorized")
        .header(
            "WWW-Authenticate",
            &b"Basic realm=\"kura\", charset=\"UTF-8\""[..],
        )
        .header("WWW-Authenticate", &b"Bearer realm=\"kura\""[..]);
    send(out, req, now, reply)
}

/// HTTP (Tyrant's and Kyoto Tycoon's REST, Kyoto Tycoon's RPC) in the steps every request
/// takes. The operation a request is depends on its route, so the mask's verdict is asked
/// where the route is known ([`Shared::verdict`]), and answered in the route's form.
struct Http<'x, 's> {
    store: &'s dyn Store,
    shared: &'x Shared,
    curs: &'x mut KtCursors<'s>,
    waited: Option<Waited>,
    now: u64,
}

impl context::Exec for Http<'_, '_> {
    type Req<'a> = Request<'a>;
    type Out = Vec<u8>;
    fn denied(&self, _shared: &Shared, _req: &Request<'_>) -> Option<bool> {
        None
    }
    fn refuse(&mut self, _req: &Request<'_>, _why: Option<String>, _out: &mut Vec<u8>) -> Next {
        Next::Continue
    }
    fn run(&mut self, req: &Request<'_>, out: &mut Vec<u8>) -> Result<Next, Error> {
        let (store, shared, now) = (self.store, self.shared, self.now);
        if req.path() == "/metrics" && matches!(req.method, Method::Get | Method::Head) {
            return Ok(send(out, req, now, metrics(store, shared)));
        }
        let reply = match req.path().strip_prefix("/rpc/") {
            Some(name) => match rpc::rpc(store, shared, self.curs, req, name, self.waited, now) {
                Ok(reply) => reply,
                Err(wait) => return Ok(Next::Wait(wait)),
            },
            None => rest::rest(store, shared, req, now),
        };
        Ok(send(out, req, now, reply))
    }
    fn failed(&mut self, req: &Request<'_>, e: Error, _start: usize, out: &mut Vec<u8>) -> Next {
        send(
            out,
            req,
            self.now,
            Reply::text(engine_error(&e).0, &e.to_string()),
        )
    }
}

/// `GET /metrics`: the Prometheus metrics ([`crate::metrics`]), refused as a `stat`.
fn metrics(store: &dyn Store, shared: &Shared) -> Reply {
    if crate::metrics::refused(shared) {
        return Reply::text(403, "Forbidden");
    }
    Reply {
        status: 200,
        headers: vec![("Content-Type", crate::metrics::CONTENT_TYPE.into())],
        body: crate::metrics::render(store, shared).into_bytes(),
    }
}

fn send(out: &mut Vec<u8>, req: &Request<'_>, now: u64, reply: Reply) -> Next {
    let mut date = Vec::with_capacity(29);
    http::write_http_date(&mut date, now);
    let mut headers: Vec<(&str, &[u8])> = Vec::with_capacity(reply.headers.len() + 2);
    headers.push(("Date", date.as_slice()));
    headers.extend(reply.headers.iter().map(|(n, v)| (*n, v.as_slice())));
    if req.keep_alive && req.version == 0 {
        headers.push(("Connection", b"Keep-Alive"));
    }
    let head_only = req.method == Method::Head;
    http::write_response(
        out,
        reply.status,
        &headers,
        &reply.body,
        req.keep_alive,
        head_only,
    );
    if req.keep_alive {
        Next::Continue
    } else {
        Next::Close
    }
}

fn bump(counter: &Counter) {
    counter.add(1);
}

/// The status and Kyoto Cabinet error text of an engine error: 400 when the request caused
/// it ([`Error::from_request`]: code 1 "not implemented" for an operation the kind lacks, 2
/// "invalid operation" for the others), 500 for a fault of the server.
pub(crate) fn engine_error(e: &Error) -> (u16, String) {
    match e {
        Error::Unsupported(_) => (400, db_error(1, &e.to_string())),
        _ if e.from_request() => (400, db_error(2, &e.to_string())),
        _ => (500, db_error(9, &e.to_string())),
    }
}

#[cfg(test)]
mod tests;
