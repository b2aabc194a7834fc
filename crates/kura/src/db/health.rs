//! `kura db check` and `repair`, and the progress counter long commands show.

use super::*;

/// A progress counter on stderr, shown only when stderr is a terminal.
pub(crate) struct Progress {
    enabled: bool,
    shown: bool,
    verb: &'static str,
    last: Instant,
}

impl Progress {
    const EVERY: Duration = Duration::from_millis(200);

    pub(crate) fn new(verb: &'static str, enabled: bool) -> Progress {
        Progress {
            enabled: enabled && io::stderr().is_terminal(),
            shown: false,
            verb,
            last: Instant::now(),
        }
    }

    /// Show `count` (and a percentage when `of` is known), at most every [`Self::EVERY`].
    pub(crate) fn tick(&mut self, count: u64, done: u64, of: Option<u64>) {
        if self.enabled && self.last.elapsed() >= Self::EVERY {
            self.last = Instant::now();
            self.show(count, done, of);
        }
    }

    fn show(&mut self, count: u64, done: u64, of: Option<u64>) {
        let pct = match of {
            Some(total) if total > 0 => format!(" ({}%)", (done.min(total) * 100) / total),
            _ => String::new(),
        };
        eprint!("\rkura: {} {count} records{pct}", self.verb);
        self.shown = true;
    }

    /// Show the final count when a progress line was shown at all.
    pub(crate) fn finish(&mut self, count: u64, done: u64, of: Option<u64>) {
        if self.shown {
            self.show(count, done, of);
            eprintln!();
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // End the progress line so that an error message starts on a line of its own.
        if self.shown {
            eprintln!();
        }
    }
}

pub(super) fn check(db: &dyn Store, name: &str) -> Res {
    let report = match db.check() {
        Ok(r) => r,
        Err(Error::Corrupt(m)) => return Err(Fail::No(format!("{name} is unhealthy: {m}"))),
        Err(e) => return Err(e.into()),
    };
    let mut s = format!("records: {}\n", report.records);
    for d in &report.damage {
        s.push_str(&format!("damaged: {d}\n"));
    }
    for p in &report.problems {
        s.push_str(&format!("problem: {p}\n"));
    }
    for w in &report.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    if report.healthy() {
        s.push_str("healthy\n");
        return print(s.as_bytes());
    }
    let lost = report.lost();
    let mut what = Vec::new();
    if !report.damage.is_empty() {
        what.push(format!(
            "{} damaged region(s), at least {lost} record(s) lost",
            report.damage.len()
        ));
    }
    if !report.problems.is_empty() {
        what.push(format!("{} problem(s)", report.problems.len()));
    }
    let what = what.join(", ");
    s.push_str(&format!("unhealthy: {what}\n"));
    print(s.as_bytes())?;
    let hint = if report.damage.is_empty() {
        String::new()
    } else {
        format!(
            "; `kura db repair {name} NEW.kh` writes a new database of every record that verifies"
        )
    };
    Err(Fail::No(format!("{name} is unhealthy: {what}{hint}")))
}

pub(super) fn repair(src: &str, dst: Option<&str>, in_place: bool) -> Res {
    let (report, kept) = match (dst, in_place) {
        (Some(dst), false) => (engine::repair(src, dst)?, None),
        _ => {
            let (r, kept) = engine::repair_in_place(src)?;
            (r, Some(kept))
        }
    };
    let mut s = String::new();
    for d in &report.damage {
        s.push_str(&format!("damaged: {d}\n"));
    }
    s.push_str(&format!(
        "kept: {} records\nlost: {} records (at least)\nskipped: {} damaged bytes\n",
        report.kept, report.lost, report.damaged_bytes
    ));
    if let Some(k) = kept {
        s.push_str(&format!("damaged files kept as {}\n", k.display()));
    }
    print(s.as_bytes())
}

/// After a pass over every record: a read-only open serves what verifies and skips the damage
/// (`damaged` records or regions), which must not pass unnoticed (status 1 and a note on
/// stderr; the output is complete otherwise).
pub(crate) fn damage_note(damaged: u64, name: &str) -> Res {
    match damaged {
        0 => Ok(()),
        n => Err(Fail::No(format!(
            "{name}: {n} damaged region(s) skipped, their records left out; `kura db check \
             {name}` lists them"
        ))),
    }
}
