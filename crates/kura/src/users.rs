//! `kura users`: write a users file for `kura serve --users` (see `kura_server::auth` for its
//! format). Passwords are read from stdin and only their hashes are written.

use clap::{Args, Subcommand};
use kura_server::auth::{self, Rights, Users};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum UsersCommand {
    /// Add a user or set their password and rights: the password is the first line of stdin
    /// (`echo 'pw' | kura users add users.txt alice --rights read,write`).
    Add(AddArgs),
    /// Give a user a new bearer token (for HTTP `Authorization: Bearer`): printed once on
    /// stdout; the file keeps only its hash.
    Token(NameArgs),
    /// Remove a user.
    Del(NameArgs),
}

#[derive(Args)]
pub struct AddArgs {
    /// The users file (created when missing, mode 0600).
    file: PathBuf,
    name: String,
    /// The rights: read, write, admin (or all), comma-separated. A user's rights stay as they
    /// are when this is left out; a new user gets read.
    #[arg(long)]
    rights: Option<String>,
}

#[derive(Args)]
pub struct NameArgs {
    file: PathBuf,
    name: String,
}

pub fn run(cmd: UsersCommand) -> ExitCode {
    let r = match cmd {
        UsersCommand::Add(a) => add(&a),
        UsersCommand::Token(a) => token(&a),
        UsersCommand::Del(a) => edit(&a.file, &a.name, |line| {
            line.ok_or_else(|| format!("no user `{}`", a.name))?;
            Ok(None)
        }),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kura users: {e}");
            ExitCode::from(1)
        }
    }
}

fn valid_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.starts_with('#') || name.chars().any(|c| c.is_whitespace()) {
        return Err(format!(
            "`{name}` cannot be a user name (no spaces, not starting with #)"
        ));
    }
    Ok(())
}

fn add(a: &AddArgs) -> Result<(), String> {
    valid_name(&a.name)?;
    let rights = a.rights.as_deref().map(Rights::parse).transpose()?;
    let mut input = Vec::new();
    std::io::stdin()
        .take(64 << 10)
        .read_to_end(&mut input)
        .map_err(|e| format!("reading the password from stdin: {e}"))?;
    let pw = input.split(|&b| b == b'\n').next().unwrap_or_default();
    let pw = pw.strip_suffix(b"\r").unwrap_or(pw);
    if pw.is_empty() {
        return Err("no password on stdin".into());
    }
    let hash = auth::hash_password(pw)?;
    edit(&a.file, &a.name, |line| {
        let (old_rights, tokens) = match line {
            Some(l) => {
                let mut f = l.split_whitespace().skip(1);
                let r = f.next().unwrap_or("read").to_string();
                let t: Vec<String> = f
                    .filter(|s| s.starts_with("token-sha256$"))
                    .map(String::from)
                    .collect();
                (r, t)
            }
            None => ("read".to_string(), Vec::new()),
        };
        let r = rights.map_or(old_rights, |r| r.names());
        let r = if r.is_empty() { "read".into() } else { r };
        let mut out = format!("{} {r} {hash}", a.name);
        for t in tokens {
            out.push(' ');
            out.push_str(&t);
        }
        Ok(Some(out))
    })
}

fn token(a: &NameArgs) -> Result<(), String> {
    let (tok, hash) = auth::new_token()?;
    edit(&a.file, &a.name, |line| {
        let l = line.ok_or_else(|| format!("no user `{}` (add them first)", a.name))?;
        Ok(Some(format!("{} {hash}", l.trim_end())))
    })?;
    println!("{tok}");
    Ok(())
}

/// Rewrite the file with the line of user `name` replaced by what `f` makes of it (`None`:
/// left out; a user not there is appended). Written to a new file, checked, then renamed.
fn edit(
    file: &Path,
    name: &str,
    f: impl FnOnce(Option<&str>) -> Result<Option<String>, String>,
) -> Result<(), String> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let mut lines: Vec<String> = Vec::new();
    let mut found = None;
    for l in text.lines() {
        if found.is_none() && l.split_whitespace().next() == Some(name) {
            found = Some(lines.len());
        }
        lines.push(l.to_string());
    }
    let new = f(found.map(|i| lines[i].as_str()))?;
    match (found, new) {
        (Some(i), Some(n)) => lines[i] = n,
        (Some(i), None) => {
            lines.remove(i);
        }
        (None, Some(n)) => lines.push(n),
        (None, None) => {}
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Users::parse(&out).map_err(|e| format!("{}: {e}", file.display()))?;
    let tmp = file.with_extension("tmp-kura-users");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        w.write_all(out.as_bytes())
            .and_then(|_| w.sync_all())
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
    }
    std::fs::rename(&tmp, file).map_err(|e| format!("{}: {e}", file.display()))
}
