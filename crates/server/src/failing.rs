//! A store for tests: an in-memory hash whose writes through `accept` fail after the visitor
//! has seen the record (as a disk error while writing would), so executors can be checked for
//! what they send when a write fails half-way.

use kura_engine::{BatchOp, CheckReport, Cursor, Decision, Error, Kind, Meta, Record, Store};
use std::path::Path;
use std::sync::Arc;

pub struct FailingWrites(pub Arc<dyn Store>);

impl Store for FailingWrites {
    fn get(&self, key: &[u8]) -> kura_engine::Result<Option<Record>> {
        self.0.get(key)
    }
    fn accept<'v>(
        &self,
        key: &[u8],
        visitor: &mut dyn FnMut(Option<kura_engine::Current<'_>>) -> Decision<'v>,
    ) -> kura_engine::Result<Option<Meta>> {
        let found = self.0.get(key)?;
        let cur = found.as_ref().map(|r| kura_engine::Current {
            value: &r.value,
            meta: r.meta,
        });
        match visitor(cur) {
            Decision::Keep => Ok(found.map(|r| r.meta)),
            _ => Err(Error::Io(std::io::Error::other("injected write failure"))),
        }
    }
    fn write_batch(&self, ops: &[BatchOp]) -> kura_engine::Result<()> {
        self.0.write_batch(ops)
    }
    fn cursor(&self) -> kura_engine::Result<Box<dyn Cursor + '_>> {
        self.0.cursor()
    }
    fn count(&self) -> u64 {
        self.0.count()
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn sync(&self) -> kura_engine::Result<()> {
        self.0.sync()
    }
    fn optimize(&self, params: &str) -> kura_engine::Result<()> {
        self.0.optimize(params)
    }
    fn vanish(&self) -> kura_engine::Result<()> {
        self.0.vanish()
    }
    fn copy_to(&self, dest: &Path) -> kura_engine::Result<()> {
        self.0.copy_to(dest)
    }
    fn check(&self) -> kura_engine::Result<CheckReport> {
        self.0.check()
    }
    fn kind(&self) -> Kind {
        self.0.kind()
    }
    fn describe(&self) -> Vec<(String, String)> {
        self.0.describe()
    }
    fn close(&self) -> kura_engine::Result<()> {
        self.0.close()
    }
}
