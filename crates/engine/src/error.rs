//! Engine errors. Expected outcomes (a missing key, an existing key, a failed compare-and-swap)
//! are values in [`crate::Outcome`], never errors.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Every failure the engine reports.
#[derive(Debug)]
pub enum Error {
    /// An operating-system I/O error (disk full, permission, EIO, …).
    Io(io::Error),
    /// Stored bytes fail a checksum or a structural check.
    Corrupt(String),
    /// The database name could not be parsed or names an unknown kind.
    InvalidName(String),
    /// A `#key=value` tuning parameter is unknown or has a bad value.
    InvalidParam(String),
    /// A key the kind cannot take (a fixed-length database's keys are record ids).
    InvalidKey(String),
    /// Another process (or handle) holds the database open: its process id and command line
    /// when they can be told (from the lock file, see `lock`).
    Locked {
        path: PathBuf,
        pid: Option<u32>,
        command: Option<String>,
    },
    /// No database where one must exist (an open of an existing database only, a read-only
    /// open), or no directory to create it in.
    NotFound(String),
    /// The path holds something that is not a database this build can open (a file, a
    /// directory of foreign files, a database of another kind or a newer format).
    NotADatabase(String),
    /// A key or value exceeds the limits of the kind.
    TooLarge(String),
    /// An earlier write or sync failed; the handle refuses writes until reopened.
    Poisoned(String),
    /// The kind does not support the operation (e.g. `jump` on a hash).
    Unsupported(&'static str),
    /// The stored value is not of the form a numeric operation needs.
    NotNumeric,
    /// The handle was closed.
    Closed,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Whether the operation failed for what it asked (a key the kind cannot take, a bad
    /// tuning parameter, a key or value too large, an operation the kind lacks, a number
    /// operation on a value that is not one) rather than for a fault of the database or the
    /// machine: a server answers the first with its protocol's client error.
    pub fn from_request(&self) -> bool {
        matches!(
            self,
            Error::InvalidParam(_)
                | Error::InvalidKey(_)
                | Error::TooLarge(_)
                | Error::Unsupported(_)
                | Error::NotNumeric
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Corrupt(s) => write!(f, "corrupt database: {s}"),
            Error::InvalidName(s) => write!(f, "invalid database name: {s}"),
            Error::InvalidParam(s) => write!(f, "invalid parameter: {s}"),
            Error::InvalidKey(s) => write!(f, "invalid key: {s}"),
            Error::Locked { path, pid, command } => {
                write!(
                    f,
                    "database {} is already open by another process",
                    path.display()
                )?;
                match (pid, command) {
                    (Some(pid), Some(c)) => write!(f, " (pid {pid}: {c})")?,
                    (Some(pid), None) => write!(f, " (pid {pid})")?,
                    _ => {}
                }
                write!(
                    f,
                    "; if it is a server (`kura serve`), work on the database through it with \
                     `kura remote`"
                )
            }
            Error::NotFound(s) => write!(f, "{s}"),
            Error::NotADatabase(s) => write!(f, "{s}"),
            Error::TooLarge(s) => write!(f, "too large: {s}"),
            Error::Poisoned(s) => write!(
                f,
                "database refuses writes after an earlier failure ({s}); reopen it"
            ),
            Error::Unsupported(s) => write!(f, "unsupported by this database kind: {s}"),
            Error::NotNumeric => write!(f, "the existing value is not of the numeric form"),
            Error::Closed => write!(f, "database is closed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}
