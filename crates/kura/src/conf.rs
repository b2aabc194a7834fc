//! `kura serve --config FILE` and `--print-config`: a TOML file whose keys are `kura serve`'s
//! long flags, read through clap's own definition of the flags (so every flag is a key, with
//! no list to keep in step), the command line winning over the file.

use crate::serve::ServeArgs;
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args, Command, FromArgMatches};
use std::ffi::OsString;
use std::path::Path;

/// Flags that steer reading the configuration, never written in it.
const NOT_IN_FILE: &[&str] = &["config", "print_config", "help", "version"];

/// `kura serve`'s arguments as clap defines them.
pub fn serve_command() -> Command {
    let mut cmd = ServeArgs::augment_args(Command::new("serve").bin_name("kura serve"));
    cmd.build();
    cmd
}

/// A flag's key in the file: its long name (`max-connections`), or the positional's id (`name`).
fn key_of(arg: &clap::Arg) -> String {
    arg.get_long()
        .map_or_else(|| arg.get_id().as_str().replace('_', "-"), str::to_string)
}

fn is_positional(arg: &clap::Arg) -> bool {
    arg.get_long().is_none() && arg.get_short().is_none()
}

/// The edit distance of two short strings (for "did you mean").
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The key nearest `key` among `keys`, when it is near enough to be a typo.
fn nearest<'a>(key: &str, keys: &'a [String]) -> Option<&'a str> {
    keys.iter()
        .map(|k| (distance(key, k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3) || k.starts_with(key) || key.starts_with(*k))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
}

/// One occurrence's values of a file's value, as strings for the command line.
fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

fn type_name(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a number",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "a list",
        toml::Value::Table(_) => "a table",
    }
}

/// The command-line words one key of the file stands for.
fn words(arg: &clap::Arg, key: &str, v: &toml::Value) -> Result<Vec<String>, String> {
    let flag = format!("--{key}");
    let per = arg.get_num_args().map_or(1, |r| r.min_values().max(1));
    let wrong = |want: &str| format!("{key} = {v}: expected {want}, not {}", type_name(v));
    match arg.get_action() {
        ArgAction::SetTrue | ArgAction::SetFalse => match v {
            toml::Value::Boolean(true) => Ok(vec![flag]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            _ => Err(wrong("true or false")),
        },
        ArgAction::Count => match v {
            toml::Value::Integer(n) if (0..=16).contains(n) => Ok(vec![flag; *n as usize]),
            _ => Err(wrong("a count from 0 to 16")),
        },
        ArgAction::Append => {
            let toml::Value::Array(items) = v else {
                let eg = if per > 1 {
                    "[[\"A\", \"B\"]]"
                } else {
                    "[\"A\", \"B\"]"
                };
                return Err(wrong(&format!("a list, e.g. {key} = {eg}")));
            };
            let mut out = Vec::new();
            if per > 1 {
                // Each item one occurrence: a list of its values.
                for item in items {
                    let vals: Option<Vec<String>> = match item {
                        toml::Value::Array(vs) if vs.len() == per => {
                            vs.iter().map(scalar).collect()
                        }
                        _ => None,
                    };
                    let vals = vals.ok_or_else(|| {
                        format!(
                            "{key} = {v}: expected a list of lists of {per} values each, e.g. \
                             {key} = [[\"A\", \"B\"]]"
                        )
                    })?;
                    out.push(flag.clone());
                    out.extend(vals);
                }
            } else {
                for item in items {
                    let s = scalar(item).ok_or_else(|| {
                        format!(
                            "{key} = {v}: expected a list of strings or numbers, not one holding {}",
                            type_name(item)
                        )
                    })?;
                    // `--flag=value`: a value that starts with a dash stays a value.
                    out.push(format!("{flag}={s}"));
                }
            }
            Ok(out)
        }
        _ => {
            let s = scalar(v).ok_or_else(|| wrong("a string or a number"))?;
            if is_positional(arg) {
                Ok(vec![s])
            } else {
                Ok(vec![format!("{flag}={s}")])
            }
        }
    }
}

/// The first line of a clap error, without its `error: ` prefix.
fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let line = text.lines().next().unwrap_or("").trim();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

/// A configuration file read into command-line words: per key, its words and whether it is
/// the positional (which goes last).
struct FileArgs {
    flags: Vec<(String, Vec<String>)>,
    positional: Option<(String, String)>,
}

fn read_file(path: &Path, cmd: &Command) -> Result<FileArgs, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        format!("{shown}: not a TOML file: {}", e.to_string().trim())
    })?;
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !NOT_IN_FILE.contains(&a.get_id().as_str()))
        .collect();
    let keys: Vec<String> = args.iter().map(|a| key_of(a)).collect();
    let mut out = FileArgs {
        flags: Vec::new(),
        positional: None,
    };
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (raw_key, v) in &table {
        let key = raw_key.replace('_', "-");
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            return Err(format!(
                "{shown}: `{first}` and `{raw_key}` are the same key: give it once"
            ));
        }
        seen.push((key.clone(), raw_key));
        let Some(arg) = args.iter().find(|a| key_of(a) == key) else {
            let mut msg = format!("{shown}: unknown key `{raw_key}`");
            if NOT_IN_FILE.contains(&key.replace('-', "_").as_str()) {
                msg.push_str(" (a command-line flag only)");
            } else if let Some(hint) = crate::originals::hint(&key) {
                msg.push_str(&format!(" ({hint})"));
            } else if let Some(k) = nearest(&key, &keys) {
                msg.push_str(&format!("; did you mean `{k}`?"));
            }
            msg.push_str(" (`kura serve --print-config` lists every key)");
            return Err(msg);
        };
        let w = words(arg, &key, v).map_err(|e| format!("{shown}: {e}"))?;
        // Each key alone, so that a bad value is named with its key and file.
        let mut alone = vec!["kura serve".to_string()];
        if is_positional(arg) {
            alone.push("--".into());
        }
        alone.extend(w.iter().cloned());
        if let Err(e) = cmd.clone().try_get_matches_from(&alone) {
            return Err(format!("{shown}: {key} = {v}: {}", clap_message(&e)));
        }
        if is_positional(arg) {
            out.positional = Some((arg.get_id().to_string(), w.concat()));
        } else {
            out.flags.push((arg.get_id().to_string(), w));
        }
    }
    Ok(out)
}

/// Parse `kura serve`'s command line `cli` (without the program and subcommand names): with
/// `--config FILE`, the file's keys first and the command line over them (a flag given on the
/// command line replaces the file's value, a list flag its whole list).
pub fn resolve(cli: &[OsString]) -> Result<(ServeArgs, ArgMatches), String> {
    let cmd = serve_command();
    let argv = |words: &mut dyn Iterator<Item = OsString>| {
        std::iter::once(OsString::from("kura serve"))
            .chain(words)
            .collect::<Vec<_>>()
    };
    let given = cmd
        .clone()
        .try_get_matches_from(argv(&mut cli.iter().cloned()))
        .map_err(|e| e.to_string())?;
    let Some(path) = given.get_one::<std::path::PathBuf>("config").cloned() else {
        let a = ServeArgs::from_arg_matches(&given).map_err(|e| e.to_string())?;
        return Ok((a, given));
    };
    let file = read_file(&path, &cmd)?;
    let on_cli = |id: &str| given.value_source(id) == Some(ValueSource::CommandLine);
    let mut words: Vec<OsString> = Vec::new();
    for (id, w) in &file.flags {
        if !on_cli(id) {
            words.extend(w.iter().map(OsString::from));
        }
    }
    words.extend(cli.iter().cloned());
    if let Some((id, name)) = &file.positional {
        if !on_cli(id) {
            if !cli.iter().any(|w| w == "--") {
                words.push("--".into());
            }
            words.push(name.into());
        }
    }
    let m = cmd
        .try_get_matches_from(argv(&mut words.into_iter()))
        .map_err(|e| format!("{}: {}", path.display(), clap_message(&e)))?;
    let a = ServeArgs::from_arg_matches(&m).map_err(|e| e.to_string())?;
    Ok((a, m))
}

/// A raw value as TOML: a number where it reads as one exactly, else a string.
fn toml_value(s: &str) -> String {
    if s.parse::<i64>().is_ok_and(|n| n.to_string() == s) {
        return s.to_string();
    }
    if s.parse::<f64>()
        .is_ok_and(|f| f.is_finite() && f.to_string() == s && s.contains('.'))
    {
        return s.to_string();
    }
    toml::Value::String(s.to_string()).to_string()
}

/// The effective configuration, key by key in the flags' order: each flag's value as TOML
/// (the default where none was given), `None` for an unset optional one.
pub fn settings(m: &ArgMatches) -> Vec<(String, Option<String>)> {
    let cmd = serve_command();
    let mut out = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if NOT_IN_FILE.contains(&id) {
            continue;
        }
        let value = match arg.get_action() {
            ArgAction::SetTrue | ArgAction::SetFalse => Some(m.get_flag(id).to_string()),
            ArgAction::Count => Some(m.get_count(id).to_string()),
            ArgAction::Append => {
                let per = arg.get_num_args().map_or(1, |r| r.min_values().max(1));
                let occ: Vec<Vec<String>> = m
                    .get_raw_occurrences(id)
                    .map(|o| {
                        o.map(|vals| vals.map(|v| toml_value(&v.to_string_lossy())).collect())
                            .collect()
                    })
                    .unwrap_or_default();
                let items: Vec<String> = if per > 1 {
                    occ.iter()
                        .map(|vals| format!("[{}]", vals.join(", ")))
                        .collect()
                } else {
                    occ.into_iter().flatten().collect()
                };
                Some(format!("[{}]", items.join(", ")))
            }
            _ => m
                .get_raw(id)
                .and_then(|mut v| v.next())
                .map(|v| toml_value(&v.to_string_lossy())),
        };
        out.push((key_of(arg), value));
    }
    out
}

/// The effective configuration as the TOML `--config` reads: every flag with its value (the
/// default where none was given), unset optional ones as comments.
pub fn print(m: &ArgMatches) -> String {
    let mut out = String::from(
        "# kura serve's effective configuration: `kura serve --config FILE` reads this file\n\
         # (keys are kura serve's long flags; flags on the command line override them).\n",
    );
    for (key, value) in settings(m) {
        match value {
            Some(v) => out.push_str(&format!("{key} = {v}")),
            None => out.push_str(&format!("# {key} = (not set)")),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn file(text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("kura.toml");
        std::fs::write(&p, text).unwrap();
        let s = p.to_string_lossy().into_owned();
        (dir, s)
    }

    #[test]
    fn the_command_line_overrides_the_file_and_replaces_its_lists() {
        let (_d, p) = file("port = 2000\nmask = [\"out\", \"vanish\"]\ndaemon = false\n");
        let (_, m) = resolve(&os(&["--config", &p, "--port", "3000", "--mask", "put"])).unwrap();
        let text = print(&m);
        assert!(text.contains("\nport = 3000\n"), "{text}");
        assert!(text.contains("\nmask = [\"put\"]\n"), "{text}");
        let (_, m) = resolve(&os(&["--config", &p])).unwrap();
        let text = print(&m);
        assert!(text.contains("\nport = 2000\n"), "{text}");
        assert!(text.contains("\nmask = [\"out\", \"vanish\"]\n"), "{text}");
    }

    #[test]
    fn printed_configuration_reads_back_the_same() {
        let (_d, p) = file("name = \"x.kh#sync=always\"\nhost = \"0.0.0.0\"\nthreads = 3\n");
        let (_, m) = resolve(&os(&["--config", &p, "--unmask", "get", "--daemon"])).unwrap();
        let first = print(&m);
        let (_d2, p2) = file(&first);
        let (_, m2) = resolve(&os(&["--config", &p2])).unwrap();
        assert_eq!(first, print(&m2));
        assert!(first.contains("name = \"x.kh#sync=always\""));
        assert!(first.contains("daemon = true"));
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_key_and_the_file() {
        let (_d, p) = file("prot = 1978\n");
        let e = resolve(&os(&["--config", &p])).err().unwrap();
        assert!(
            e.contains("unknown key `prot`") && e.contains("`port`") && e.contains(&p),
            "{e}"
        );
        let (_d, p) = file("thnum = 8\n");
        let e = resolve(&os(&["--config", &p])).err().unwrap();
        assert!(e.contains("--threads"), "{e}");
        let (_d, p) = file("daemon = \"yes\"\n");
        let e = resolve(&os(&["--config", &p])).err().unwrap();
        assert!(e.contains("daemon") && e.contains("true or false"), "{e}");
        let (_d, p) = file("mask = \"out\"\n");
        let e = resolve(&os(&["--config", &p])).err().unwrap();
        assert!(e.contains("expected a list"), "{e}");
        let (_d, p) = file("port = \"abc\"\n");
        let e = resolve(&os(&["--config", &p])).err().unwrap();
        assert!(e.contains("port = \"abc\"") && e.contains(&p), "{e}");
        let (_d, p) = file("max_connections = 1\nmax-connections = 2\n");
        let e = resolve(&os(&["--config", &p])).err().unwrap();
        assert!(e.contains("the same key"), "{e}");
        let (_d, p) = file("config = \"other.toml\"\n");
        let e = resolve(&os(&["--config", &p])).err().unwrap();
        assert!(e.contains("command-line flag only"), "{e}");
    }

    #[test]
    fn a_value_starting_with_a_dash_stays_a_value() {
        let (_d, p) = file("log = \"-odd.log\"\nmask = [\"-x\"]\n");
        let (_, m) = resolve(&os(&["--config", &p])).unwrap();
        let text = print(&m);
        assert!(text.contains("\nlog = \"-odd.log\"\n"), "{text}");
        assert!(text.contains("\nmask = [\"-x\"]\n"), "{text}");
    }

    #[test]
    fn underscores_spell_the_same_key() {
        let (_d, p) = file("max_connections = 10\n");
        let (_, m) = resolve(&os(&["--config", &p])).unwrap();
        assert!(print(&m).contains("\nmax-connections = 10\n"));
    }
}
