//! Kura's embedded storage library — the cabinet.
//!
//! Every database kind implements [`Store`] and is opened by name with [`open`]:
//!
//! ```
//! let db = kura_engine::open("*").unwrap();
//! db.put(b"key", b"value").unwrap();
//! assert_eq!(db.get(b"key").unwrap().unwrap().value, b"value");
//! ```

pub mod compress;
pub mod counter;
pub mod cursor;
pub mod durability;
pub mod error;
pub mod hash;
pub mod io;
pub mod lock;
pub mod mem;
pub mod meta;
pub mod name;
pub mod store;
pub mod tsv;

pub use error::{Error, Result};
pub use name::{
    open, open_as, open_existing, open_readonly, repair, repair_in_place, Compression, OpenMode,
    Opened, Params, SyncMode,
};
pub use store::{
    BatchOp, CheckReport, Counted, Current, Cursor, Damaged, Decision, KeyRange, Kind, Meta,
    Outcome, Pinned, Record, RepairReport, Shown, Store, Value,
};
