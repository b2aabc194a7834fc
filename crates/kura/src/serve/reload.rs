//! SIGHUP's reload of the configuration file (`kura serve --config FILE`): the file is read
//! again under the original command line (which still wins, as at start: the same
//! `conf::resolve`), what can change without a restart is applied (the log level, the command
//! mask), and the other settings that changed are named as waiting for a restart. A file that
//! no longer reads changes nothing. Each outcome is one log line.

use super::log::Log;
use kura_server::context::{Level, Shared};
use kura_server::mask::Mask;
use std::ffi::OsString;
use std::path::PathBuf;

/// Settings key by key, as `conf::settings` gives them.
type Settings = Vec<(String, Option<String>)>;

/// The settings SIGHUP applies; every other one needs a restart.
const APPLIED: &[&str] = &["log-level", "mask", "unmask"];

/// What a reload needs: the command line and the settings in force.
pub struct Reload {
    /// `kura serve`'s words as given (without the program and subcommand names).
    cli: Vec<OsString>,
    /// The `--config` file, as given (for the log).
    file: PathBuf,
    /// The settings in force: those of the start, with what reloads have applied since.
    running: Settings,
}

/// What reading the file again found, before anything is applied.
#[derive(Debug, PartialEq, Eq)]
pub struct Changes {
    /// The log level, when it changes: (in force, read).
    pub level: Option<(Level, Level)>,
    /// The command mask, when it changes.
    pub mask: Option<(Mask, Mask)>,
    /// The keys that changed but need a restart, in the flags' order.
    pub restart: Vec<String>,
}

fn level_name(l: Level) -> String {
    l.name().to_ascii_lowercase()
}

impl Reload {
    pub fn new(cli: Vec<OsString>, file: PathBuf, running: Settings) -> Self {
        Reload { cli, file, running }
    }

    /// Read the file again with the command line over it and compare with what is in force
    /// (`level` and `mask`); `Err` says why the file no longer reads.
    fn read(&self, level: Level, mask: Mask) -> Result<(Changes, Settings), String> {
        let (a, m) = crate::conf::resolve(&self.cli).map_err(|e| e.trim_end().to_string())?;
        let new_mask = super::command_mask(&a)?;
        let settings = crate::conf::settings(&m);
        let restart = settings
            .iter()
            .filter(|(k, v)| {
                !APPLIED.contains(&k.as_str())
                    && self
                        .running
                        .iter()
                        .find(|(rk, _)| rk == k)
                        .map(|(_, rv)| rv)
                        != Some(v)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let changes = Changes {
            level: (a.log_level != level).then_some((level, a.log_level)),
            mask: (new_mask != mask).then_some((mask, new_mask)),
            restart,
        };
        Ok((changes, settings))
    }

    /// Read the file again and apply what changed; every outcome is logged: one line per
    /// change (`log level info → debug`, `mask: +out -get`), one naming what needs a restart,
    /// or why nothing changed.
    pub fn reload(&mut self, log: &Log, shared: &Shared) {
        let shown = self.file.display();
        let (changes, settings) = match self.read(log.level(), shared.mask.get()) {
            Ok(x) => x,
            Err(e) => {
                log.warn(&format!(
                    "configuration {shown} not reloaded, the settings in force stay: {e}"
                ));
                return;
            }
        };
        // Each line is written while the more verbose of the two levels is in force, so
        // that lowering the level still says so.
        let mut lines = Vec::new();
        if let Some((old, new)) = changes.level {
            lines.push(format!(
                "log level {} → {}",
                level_name(old),
                level_name(new)
            ));
            if new > old {
                log.set_level(new);
            }
        }
        if let Some((old, new)) = changes.mask {
            shared.mask.set(new);
            lines.push(format!("mask: {}", Mask::changes(old, new)));
        }
        for l in &lines {
            log.line(l);
        }
        if !changes.restart.is_empty() {
            log.warn(&format!(
                "configuration {shown}: changed but in force only after a restart: {}",
                changes.restart.join(", ")
            ));
        } else if lines.is_empty() {
            log.line(&format!(
                "configuration {shown} read again: nothing to change"
            ));
        }
        if let Some((old, new)) = changes.level {
            if new < old {
                log.set_level(new);
            }
        }
        // What is applied is in force now; what waits for a restart is not.
        for (k, v) in settings {
            if APPLIED.contains(&k.as_str()) {
                match self.running.iter_mut().find(|(rk, _)| *rk == k) {
                    Some(slot) => slot.1 = v,
                    None => self.running.push((k, v)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(text: &str, cli: &[&str]) -> (tempfile::TempDir, PathBuf, Reload) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kura.toml");
        std::fs::write(&file, text).unwrap();
        let mut words: Vec<OsString> = vec!["--config".into(), file.clone().into()];
        words.extend(cli.iter().map(OsString::from));
        let (_, m) = crate::conf::resolve(&words).unwrap();
        let r = Reload::new(words, file.clone(), crate::conf::settings(&m));
        (dir, file, r)
    }

    #[test]
    fn the_level_and_mask_apply_and_other_keys_wait_for_a_restart() {
        let (_d, file, mut r) = setup("port = 2000\nmask = [\"vanish\"]\n", &[]);
        let vanish = Mask::NONE.mask("vanish").unwrap();
        std::fs::write(
            &file,
            "port = 2001\nmask = [\"out\"]\nlog-level = \"debug\"\nthreads = 3\n",
        )
        .unwrap();
        let (c, settings) = r.read(Level::Info, vanish).unwrap();
        assert_eq!(c.level, Some((Level::Info, Level::Debug)));
        assert_eq!(c.mask, Some((vanish, Mask::NONE.mask("out").unwrap())));
        assert_eq!(c.restart, ["port", "threads"]);
        r.running = settings;
        let (c, _) = r
            .read(Level::Debug, Mask::NONE.mask("out").unwrap())
            .unwrap();
        assert_eq!(
            c,
            Changes {
                level: None,
                mask: None,
                restart: Vec::new()
            }
        );
    }

    #[test]
    fn the_command_line_still_wins() {
        let (_d, file, r) = setup(
            "mask = [\"vanish\"]\n",
            &["--mask", "put", "--log-level", "warn"],
        );
        std::fs::write(&file, "mask = [\"out\"]\nlog-level = \"debug\"\n").unwrap();
        let put = Mask::NONE.mask("put").unwrap();
        let (c, _) = r.read(Level::Warn, put).unwrap();
        assert_eq!((c.level, c.mask), (None, None));
        assert!(c.restart.is_empty(), "{:?}", c.restart);
    }

    #[test]
    fn a_file_that_no_longer_reads_is_an_error() {
        let (_d, file, r) = setup("mask = [\"vanish\"]\n", &[]);
        for (text, want) in [
            ("port = \n", "not a TOML file"),
            ("prot = 1\n", "unknown key `prot`"),
            ("mask = [\"nosuch\"]\n", "nosuch"),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = r.read(Level::Info, Mask::NONE).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
        std::fs::remove_file(&file).unwrap();
        assert!(r.read(Level::Info, Mask::NONE).is_err());
    }
}
