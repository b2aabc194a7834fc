//! Kura's JSON query endpoint on a table: `POST /_query` with a JSON object (conditions,
//! order, limit, skip, columns, count, hint) answered with the records as JSON (see
//! docs/PROTOCOL-HTTP.md). The query is read into Tyrant's `search` commands and run by the
//! engine's [`query`] as `misc search` runs it; nothing is removed here.

use super::Reply;
use kura_engine::table::query;
use kura_engine::{Error, Store};
use serde_json::{json, Map, Value};

/// The path of the endpoint.
pub(super) const PATH: &str = "/_query";

fn bad(why: &str) -> Reply {
    Reply::text(400, why)
}

fn json_reply(v: &Value) -> Reply {
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    Reply {
        status: 200,
        headers: vec![("Content-Type", b"application/json".to_vec())],
        body,
    }
}

/// A string field of `o` (`None` when absent).
fn text<'a>(o: &'a Map<String, Value>, name: &str, what: &str) -> Result<Option<&'a str>, String> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{what}: `{name}` must be a string")),
    }
}

/// A non-negative integer field of `o`.
fn count_field(o: &Map<String, Value>, name: &str) -> Result<Option<u64>, String> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{name}` must be a non-negative integer")),
    }
}

fn flag(o: &Map<String, Value>, name: &str) -> Result<bool, String> {
    match o.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("`{name}` must be true or false")),
    }
}

/// The body read into Tyrant's search commands (the query's parts NUL-separated), and whether
/// only the count is asked.
fn commands(body: &[u8]) -> Result<(Vec<Vec<u8>>, bool), String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the query is not valid JSON: {e}"))?;
    let Value::Object(o) = v else {
        return Err("the query must be a JSON object".into());
    };
    const KNOWN: [&str; 7] = [
        "conditions",
        "order",
        "limit",
        "skip",
        "columns",
        "count",
        "hint",
    ];
    if let Some(k) = o.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!(
            "unknown field `{k}`: expected conditions, order, limit, skip, columns, count, hint"
        ));
    }
    let join = |parts: &[&str]| parts.join("\0").into_bytes();
    let mut cmds = Vec::new();
    match o.get("conditions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(conds)) => {
            for (i, c) in conds.iter().enumerate() {
                let what = format!("condition {i}");
                let Value::Object(c) = c else {
                    return Err(format!(
                        "{what}: expected an object {{\"column\", \"op\", \"expr\"}}"
                    ));
                };
                let column = text(c, "column", &what)?.unwrap_or("");
                let op = text(c, "op", &what)?.ok_or(format!("{what}: `op` is missing"))?;
                let expr = match c.get("expr") {
                    Some(Value::Number(n)) => n.to_string(),
                    _ => text(c, "expr", &what)?
                        .ok_or(format!("{what}: `expr` is missing"))?
                        .to_string(),
                };
                let mut op = op.to_string();
                if flag(c, "negate").map_err(|e| format!("{what}: {e}"))? {
                    op.insert(0, '!');
                }
                if flag(c, "noidx").map_err(|e| format!("{what}: {e}"))? {
                    op.insert(0, '+');
                }
                cmds.push(join(&["addcond", column, &op, &expr]));
            }
        }
        Some(_) => return Err("`conditions` must be an array".into()),
    }
    match o.get("order") {
        None | Some(Value::Null) => {}
        Some(Value::Object(ord)) => {
            let column = text(ord, "column", "order")?.unwrap_or("");
            let typ = text(ord, "type", "order")?.unwrap_or("STRASC");
            cmds.push(join(&["setorder", column, typ]));
        }
        Some(_) => return Err("`order` must be an object {\"column\", \"type\"}".into()),
    }
    let limit = count_field(&o, "limit")?;
    let skip = count_field(&o, "skip")?.unwrap_or(0);
    if limit.is_some() || skip > 0 {
        let max = limit.map_or("-1".to_string(), |m| m.to_string());
        cmds.push(join(&["setlimit", &max, &skip.to_string()]));
    }
    let mut get = vec!["get".to_string(), String::new()];
    match o.get("columns") {
        None | Some(Value::Null) => get.truncate(1),
        Some(Value::Array(cols)) => {
            for c in cols {
                match c {
                    Value::String(s) => get.push(s.clone()),
                    _ => return Err("`columns` must be an array of strings".into()),
                }
            }
        }
        Some(_) => return Err("`columns` must be an array of strings".into()),
    }
    cmds.push(get.join("\0").into_bytes());
    let count = flag(&o, "count")?;
    if count {
        cmds.push(b"count".to_vec());
    }
    if flag(&o, "hint")? {
        cmds.push(b"hint".to_vec());
    }
    Ok((cmds, count))
}

/// Run the JSON query of `body` on `store`: `{"records": [{"key": …, "columns": {…}}, …]}`
/// (or `{"count": n}`), with `"hint"` when asked.
pub(super) fn json_query(store: &dyn Store, body: &[u8]) -> Result<Reply, Error> {
    if store.table().is_none() {
        return Ok(bad("a query needs a table database (PATH.kt)"));
    }
    let (cmds, count) = match commands(body) {
        Ok(c) => c,
        Err(why) => return Ok(bad(&why)),
    };
    let args: Vec<&[u8]> = cmds.iter().map(Vec::as_slice).collect();
    let items = match query::parse_search(&args).and_then(|s| query::run_search(store, &s)) {
        Ok(items) => items,
        Err(e) if e.from_request() => return Ok(bad(&e.to_string())),
        Err(e) => return Err(e),
    };
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut out = Map::new();
    let mut records = Vec::new();
    for it in &items {
        if let Some(h) = it.strip_prefix(b"\0\0[[HINT]]\n") {
            out.insert("hint".into(), Value::String(s(h)));
        } else if count {
            let n: u64 = s(it).parse().unwrap_or(0);
            out.insert("count".into(), json!(n));
        } else {
            // `\0KEY\0NAME\0VALUE…`: the primary key under the empty name first.
            let mut fields = it.split(|&b| b == 0).skip(1);
            let key = fields.next().map(s).unwrap_or_default();
            let mut cols = Map::new();
            while let (Some(n), Some(v)) = (fields.next(), fields.next()) {
                cols.insert(s(n), Value::String(s(v)));
            }
            records.push(json!({"key": key, "columns": cols}));
        }
    }
    if !count {
        out.insert("records".into(), Value::Array(records));
    }
    Ok(json_reply(&Value::Object(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(body: &str) -> Result<Vec<String>, String> {
        commands(body.as_bytes()).map(|(c, _)| {
            c.into_iter()
                .map(|c| String::from_utf8(c).unwrap().replace('\0', "|"))
                .collect()
        })
    }

    #[test]
    fn a_json_query_becomes_tyrants_search_commands() {
        assert_eq!(
            cmds(
                r#"{"conditions": [{"column": "age", "op": "NUMGE", "expr": 30, "negate": true},
                   {"column": "", "op": "STRBW", "expr": "k"}],
                   "order": {"column": "age", "type": "NUMDESC"}, "limit": 2, "skip": 1,
                   "columns": ["name"], "hint": true}"#
            )
            .unwrap(),
            [
                "addcond|age|!NUMGE|30",
                "addcond||STRBW|k",
                "setorder|age|NUMDESC",
                "setlimit|2|1",
                "get||name",
                "hint"
            ]
        );
        assert_eq!(cmds("{}").unwrap(), ["get"]);
        assert!(cmds("{").unwrap_err().contains("not valid JSON"));
        assert!(cmds("[]").unwrap_err().contains("JSON object"));
        assert!(cmds(r#"{"limt": 1}"#)
            .unwrap_err()
            .contains("unknown field `limt`"));
        assert!(cmds(r#"{"limit": -1}"#)
            .unwrap_err()
            .contains("non-negative"));
        assert!(cmds(r#"{"conditions": [{"column": "a"}]}"#)
            .unwrap_err()
            .contains("`op` is missing"));
    }
}
