#![no_main]
//! Opening an update log whose newest file holds arbitrary bytes after a valid header, and
//! reading it back: an error or a cut torn tail, never a panic.
use kura_engine::ulog::{read_dir, Config, Ulog};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    let ulog = dir.path().join("u");
    {
        let mut c = Config::new(&ulog, 1);
        c.sync = kura_engine::SyncMode::None;
        let log = Ulog::open(c).unwrap();
        log.close().unwrap();
    }
    let file = ulog.join(format!("{:020}.kul", 1));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend_from_slice(data);
    std::fs::write(&file, &bytes).unwrap();
    let _ = read_dir(&ulog, 0, u64::MAX, &mut |_| Ok(()));
    let mut c = Config::new(&ulog, 1);
    c.sync = kura_engine::SyncMode::None;
    if let Ok(log) = Ulog::open(c) {
        let _ = log.close();
    }
});
