//! Kura's embedded storage library — the cabinet.
//!
//! Every database kind implements [`Store`] and is opened by name with [`open`] (the kinds and
//! what each can do: [`registry`]):
//!
//! ```
//! let db = kura_engine::open("*").unwrap();
//! db.put(b"key", b"value").unwrap();
//! assert_eq!(db.get(b"key").unwrap().unwrap().value, b"value");
//! ```

pub mod compress;
pub mod config;
pub mod counter;
pub mod cursor;
pub mod durability;
pub mod error;
pub mod fixed;
pub mod hash;
pub mod io;
pub mod lock;
pub mod log;
pub mod mem;
pub mod meta;
pub mod name;
pub mod numbers;
pub mod registry;
mod repair;
pub mod store;
pub mod table;
pub mod tree;
pub mod tsv;
pub mod ulog;

pub use config::{Compression, OpenMode, Params, SyncMode};
pub use error::{Error, Result};
pub use name::{open, open_as, open_existing, open_readonly, repair, repair_in_place};
pub use registry::{Caps, KindInfo, Opened};
pub use store::{
    BatchOp, CheckReport, Counted, Current, Cursor, Damaged, Decision, KeyRange, Kind, KyotoOps,
    MemcachedOps, Meta, Outcome, Pinned, Record, RepairReport, Shown, Store, TokyoOps, Value,
};
