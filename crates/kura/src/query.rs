//! The arguments of `kura db search` and `kura remote search` (what `tctmgr search` and
//! `tcrmgr search` offered), turned into Tyrant's `misc search` commands, and the printing of
//! the reply's elements: both run the same commands, one on the file, one on a server.

use crate::db::{print, Fail, Res};
use clap::Args;
use kura_engine::tsv;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

/// A query on a table: conditions, order, limit and what to answer.
#[derive(Args, Clone, Debug)]
pub(crate) struct SearchArgs {
    /// Conditions, each three words: COLUMN OPERATOR EXPRESSION (`""` is the primary key; an
    /// operator as Tokyo Cabinet names it: STREQ, STRINC, STRBW, STREW, STRAND, STROR,
    /// STROREQ, STRRX, NUMEQ, NUMGT, NUMGE, NUMLT, NUMLE, NUMBT, NUMOREQ, FTSPH, FTSAND,
    /// FTSOR, FTSEX, or its number; `~` or `!` before it negates, `+` uses no index).
    #[arg(value_name = "COLUMN OPERATOR EXPRESSION")]
    pub conds: Vec<OsString>,
    /// Order by COLUMN; TYPE is STRASC, STRDESC, NUMASC or NUMDESC (or 0–3).
    #[arg(long, num_args = 2, value_names = ["COLUMN", "TYPE"])]
    pub ord: Option<Vec<OsString>>,
    /// At most this many records.
    #[arg(long, short = 'm', value_name = "NUM")]
    pub max: Option<u64>,
    /// Leave out this many first records.
    #[arg(long, value_name = "NUM", default_value_t = 0)]
    pub skip: u64,
    /// Print each record's columns after its key: `KEY<TAB>NAME<TAB>VALUE…` (TSV-escaped).
    #[arg(long)]
    pub pv: bool,
    /// Print only these columns after each key (repeatable).
    #[arg(long = "column", value_name = "NAME")]
    pub columns: Vec<OsString>,
    /// Print only how many records match.
    #[arg(long, short = 'c')]
    pub count: bool,
    /// Remove the matching records (each only if it still matches when it is removed).
    #[arg(long, visible_alias = "rm")]
    pub out: bool,
    /// Print the plan taken, each line after `<TAB>:::: `.
    #[arg(long)]
    pub hint: bool,
    /// A metasearch: each condition is a query of its own (with the order and limit), joined
    /// by TYPE: UNION, ISECT or DIFF (or 0–2).
    #[arg(long, value_name = "TYPE")]
    pub ms: Option<String>,
}

impl SearchArgs {
    /// These arguments as `kura remote search` takes them (each word as a shell needs it).
    pub(crate) fn remote_words(&self) -> String {
        let w = |s: &OsString| crate::db::shell_word(s);
        let mut words: Vec<String> = Vec::new();
        if let Some(o) = &self.ord {
            words.push(format!("--ord {} {}", w(&o[0]), w(&o[1])));
        }
        if let Some(m) = self.max {
            words.push(format!("--max {m}"));
        }
        if self.skip > 0 {
            words.push(format!("--skip {}", self.skip));
        }
        let flags = [
            (self.pv, "--pv"),
            (self.count, "--count"),
            (self.out, "--out"),
            (self.hint, "--hint"),
        ];
        words.extend(flags.iter().filter(|f| f.0).map(|f| f.1.to_string()));
        words.extend(self.columns.iter().map(|c| format!("--column {}", w(c))));
        if let Some(ms) = &self.ms {
            words.push(format!("--ms {}", w(&OsString::from(ms))));
        }
        if self.conds.iter().any(|c| c.as_bytes().starts_with(b"-")) {
            words.push("--".into());
        }
        words.extend(self.conds.iter().map(w));
        words.join(" ")
    }

    /// Tyrant's `misc search` arguments: one command each, its parts NUL-separated.
    pub(crate) fn commands(&self) -> Result<Vec<Vec<u8>>, Fail> {
        if !self.conds.len().is_multiple_of(3) {
            return Err(Fail::Err(format!(
                "conditions are three words each (COLUMN OPERATOR EXPRESSION): {} given",
                self.conds.len()
            )));
        }
        let join = |parts: &[&[u8]]| parts.join(&0u8);
        let mut tail: Vec<Vec<u8>> = Vec::new();
        if let Some(o) = &self.ord {
            tail.push(join(&[b"setorder", o[0].as_bytes(), o[1].as_bytes()]));
        }
        if self.max.is_some() || self.skip > 0 {
            let max = self.max.map_or("-1".to_string(), |m| m.to_string());
            let skip = self.skip.to_string();
            tail.push(join(&[b"setlimit", max.as_bytes(), skip.as_bytes()]));
        }
        let conds: Vec<Vec<u8>> = self
            .conds
            .chunks_exact(3)
            .map(|c| {
                join(&[
                    b"addcond",
                    c[0].as_bytes(),
                    c[1].as_bytes(),
                    c[2].as_bytes(),
                ])
            })
            .collect();
        let mut cmds = Vec::new();
        match &self.ms {
            Some(ms) => {
                for (i, c) in conds.into_iter().enumerate() {
                    if i > 0 {
                        cmds.push(b"next".to_vec());
                    }
                    cmds.push(c);
                    cmds.extend(tail.iter().cloned());
                }
                cmds.push(join(&[b"mstype", ms.as_bytes()]));
            }
            None => {
                cmds.extend(conds);
                cmds.extend(tail);
            }
        }
        if self.pv || !self.columns.is_empty() {
            // The primary key first (under the empty name), then the columns asked.
            let mut get: Vec<&[u8]> = vec![b"get"];
            if !self.columns.is_empty() {
                get.push(b"");
                get.extend(self.columns.iter().map(|c| c.as_bytes()));
            }
            cmds.push(join(&get));
        }
        if self.out {
            cmds.push(b"out".to_vec());
        }
        if self.count {
            cmds.push(b"count".to_vec());
        }
        if self.hint {
            cmds.push(b"hint".to_vec());
        }
        Ok(cmds)
    }
}

/// Print the elements of a `misc search` reply: a line per key; a record (`\0KEY\0NAME\0VALUE…`)
/// as `KEY<TAB>NAME<TAB>VALUE…`; a count as it is; the hint's lines after `<TAB>:::: `. Every
/// field TSV-escaped.
pub(crate) fn print_reply(items: &[Vec<u8>]) -> Res {
    let mut out = Vec::new();
    for it in items {
        if let Some(h) = it.strip_prefix(b"\0\0[[HINT]]\n") {
            for line in h.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                out.extend_from_slice(b"\t:::: ");
                out.extend_from_slice(line);
                out.push(b'\n');
            }
            continue;
        }
        match it.strip_prefix(b"\0") {
            Some(rec) => {
                for (i, f) in rec.split(|&b| b == 0).enumerate() {
                    if i > 0 {
                        out.push(b'\t');
                    }
                    tsv::escape_into(&mut out, f);
                }
            }
            None => tsv::escape_into(&mut out, it),
        }
        out.push(b'\n');
    }
    print(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        s: SearchArgs,
    }

    fn cmds(args: &[&str]) -> Vec<String> {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap();
        let Ok(cmds) = cli.s.commands() else {
            panic!("{args:?}: not read")
        };
        cmds.into_iter()
            .map(|c| String::from_utf8(c).unwrap().replace('\0', "|"))
            .collect()
    }

    #[test]
    fn arguments_become_tyrants_search_commands() {
        assert_eq!(
            cmds(&["name", "STREQ", "al", "--ord", "age", "NUMDESC", "-m", "3", "--pv", "--hint"]),
            [
                "addcond|name|STREQ|al",
                "setorder|age|NUMDESC",
                "setlimit|3|0",
                "get",
                "hint"
            ]
        );
        assert_eq!(
            cmds(&["a", "NUMEQ", "1", "b", "NUMEQ", "2", "--ms", "UNION", "--skip", "1"]),
            [
                "addcond|a|NUMEQ|1",
                "setlimit|-1|1",
                "next",
                "addcond|b|NUMEQ|2",
                "setlimit|-1|1",
                "mstype|UNION"
            ]
        );
        assert_eq!(
            cmds(&["--column", "x", "--rm", "-c"]),
            ["get||x", "out", "count"]
        );
        let cli = Cli::try_parse_from(["x", "a", "NUMEQ"]).unwrap();
        assert!(cli.s.commands().is_err());
    }
}
