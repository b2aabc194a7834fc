use super::logged::Logged;
use super::record::{self, Op};
use super::*;
use crate::store::Store;
use crate::{KyotoOps, MemcachedOps, TokyoOps};
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;

fn cfg(dir: &Path, sid: u32) -> Config {
    let mut c = Config::new(dir.join("ulog"), sid);
    c.sync = SyncMode::None;
    c
}

type Digest = BTreeMap<Vec<u8>, (Vec<u8>, u32, u64)>;

fn digest(s: &dyn Store) -> Digest {
    let mut d = BTreeMap::new();
    s.for_each_record(&mut |k, v, m| {
        d.insert(k.to_vec(), (v.to_vec(), m.flags, m.expires));
        Ok(true)
    })
    .unwrap();
    d
}

/// Every record after `after`, decoded and applied to `to` (as a replica would).
fn follow(log: &Arc<Ulog>, after: u64, to: &dyn Store) -> u64 {
    let Start::Reader(mut r) = log.reader(after).unwrap() else {
        panic!("behind")
    };
    let mut n = 0;
    while let Some(b) = r.next(Duration::from_millis(50)).unwrap() {
        let record::Next::Record(rec, _) = record::decode(b).unwrap() else {
            panic!("incomplete")
        };
        apply::apply(to, &rec.op).unwrap();
        n += 1;
    }
    n
}

fn every_kind_of_write(db: &dyn Store) {
    db.put(b"a", b"1").unwrap();
    db.put_with(b"b", b"2", 7, 0).unwrap();
    db.putkeep(b"a", b"x", 0, 0).unwrap();
    db.putkeep(b"c", b"3", 0, 0).unwrap();
    db.putcat(b"c", b"33").unwrap();
    db.addint(b"n", 5).unwrap();
    db.addint(b"n", -2).unwrap();
    db.increment(b"k", 10, 0, 0).unwrap();
    db.incr_decimal(b"m", 3, false).unwrap();
    db.put(b"m", b"10").unwrap();
    db.incr_decimal(b"m", 3, false).unwrap();
    db.touch(b"b", 4_000_000_000).unwrap();
    db.out(b"a").unwrap();
    db.out(b"missing").unwrap();
    db.write_batch(&[
        crate::BatchOp::Put {
            key: b"p".to_vec(),
            value: b"q".to_vec(),
            flags: 1,
            expires: 0,
        },
        crate::BatchOp::Remove { key: b"c".to_vec() },
    ])
    .unwrap();
    db.seize(b"p").unwrap();
    db.put(b"z", b"zz").unwrap();
    {
        let mut c = db.cursor().unwrap();
        c.jump(b"z").unwrap();
        c.set_value(b"zzz", None).unwrap();
    }
    db.put(b"y", b"yy").unwrap();
    {
        let mut c = db.cursor().unwrap();
        if c.jump(b"y").unwrap() {
            c.remove().unwrap();
        }
    }
}

#[test]
fn a_follower_of_the_log_ends_with_the_same_records() {
    for name in ["*", "+", "x.kh", "x.kb", "x.kf"] {
        let dir = tempfile::tempdir().unwrap();
        let path = if name.starts_with('x') {
            dir.path().join(name).display().to_string()
        } else {
            name.to_string()
        };
        let inner = crate::open(&path).unwrap();
        let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
        let db = Logged::new(inner, log.clone()).unwrap();
        if name.ends_with(".kf") {
            db.put(b"1", b"one").unwrap();
            db.put(b"2", b"two").unwrap();
            db.out(b"1").unwrap();
        } else {
            every_kind_of_write(&*db);
        }
        let replica = crate::open("*").unwrap();
        follow(&log, 0, &*replica);
        assert_eq!(digest(&*db), digest(&*replica), "{name}");
        db.vanish().unwrap();
        db.put(b"3", b"after").unwrap();
        follow(&log, 0, &*replica);
        assert_eq!(digest(&*db), digest(&*replica), "{name} after vanish");
        db.close().unwrap();
    }
}

#[test]
fn duplicates_replicate_as_whole_value_lists() {
    let dir = tempfile::tempdir().unwrap();
    let inner = crate::open(&dir.path().join("t.kb").display().to_string()).unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let db = Logged::new(inner, log.clone()).unwrap();
    db.put_dup(b"d", b"1", false).unwrap();
    db.put_dup(b"d", b"2", false).unwrap();
    db.put_dup(b"d", b"0", true).unwrap();
    db.put_dup(b"e", b"x", false).unwrap();
    db.out(b"d").unwrap();
    db.remove_all(b"e").unwrap();
    let rd = dir.path().join("r.kb").display().to_string();
    let replica = crate::open(&rd).unwrap();
    follow(&log, 0, &*replica);
    assert_eq!(db.get_all(b"d").unwrap(), replica.get_all(b"d").unwrap());
    assert!(replica.get_all(b"e").unwrap().is_empty());
    // Replaying from the start again (a replica that lost its position) changes nothing.
    follow(&log, 0, &*replica);
    assert_eq!(db.get_all(b"d").unwrap(), replica.get_all(b"d").unwrap());
}

#[test]
fn time_stamps_increase_across_reopens_and_torn_tails_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let a = log.append(&Op::Remove { key: b"a" }).unwrap();
    let b = log.append(&Op::Remove { key: b"b" }).unwrap();
    assert!(b > a);
    log.close().unwrap();
    drop(log);
    // A torn record at the end: cut off when the log is opened.
    let file = dir.path().join("ulog").join(file_name(1));
    // The end of the records (the file's mapped end is zeros).
    let data = fs::read(&file).unwrap();
    let mut len = FILE_HEADER as usize;
    while let Ok(record::Next::Record(_, n)) = record::decode(&data[len..]) {
        len += n;
    }
    let len = len as u64;
    let mut torn = Vec::new();
    record::encode(&mut torn, b + 1, 1, b + 1, &Op::Remove { key: b"c" });
    let f = OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(&torn[..torn.len() - 3], len).unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    assert_eq!(log.torn_tail, torn.len() as u64 - 3);
    assert_eq!(log.last_ts(), b);
    assert!(log.append(&Op::Vanish).unwrap() > b);
}

#[test]
fn damage_before_intact_records_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    for i in 0..10u8 {
        log.append(&Op::Remove { key: &[i] }).unwrap();
    }
    log.close().unwrap();
    drop(log);
    let file = dir.path().join("ulog").join(file_name(1));
    let f = OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(&[0xff], FILE_HEADER + 40).unwrap();
    match Ulog::open(cfg(dir.path(), 1)) {
        Err(Error::Corrupt(m)) => assert!(m.contains("inside the"), "{m}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("damaged log opened"),
    }
    let mut seen = 0;
    let r = read_dir(&dir.path().join("ulog"), 0, u64::MAX, &mut |_| {
        seen += 1;
        Ok(())
    });
    assert!(
        r.is_err(),
        "a restore must not apply a damaged log in part silently"
    );
}

/// The end of the records of a log file (its mapped end is zeros).
fn records_end(data: &[u8], from: usize) -> usize {
    let mut len = from;
    while let Ok(record::Next::Record(_, n)) = record::decode(&data[len..]) {
        len += n;
    }
    len
}

/// A damaged byte in the last record, before the length the header records as synced, is
/// damage: nothing intact follows it, yet it was durable, so it is no torn tail.
#[test]
fn damage_in_the_last_synced_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    for i in 0..10u8 {
        log.append(&Op::Remove { key: &[i] }).unwrap();
    }
    log.close().unwrap();
    drop(log);
    let file = dir.path().join("ulog").join(file_name(1));
    let data = fs::read(&file).unwrap();
    let end = records_end(&data, FILE_HEADER as usize);
    let f = OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(&[data[end - 2] ^ 0x20], end as u64 - 2)
        .unwrap();
    match Ulog::open(cfg(dir.path(), 1)) {
        Err(Error::Corrupt(m)) => {
            assert!(m.contains(&format!("inside the {end} bytes synced")), "{m}")
        }
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("damaged log opened"),
    }
    assert!(read_dir(&dir.path().join("ulog"), 0, u64::MAX, &mut |_| Ok(())).is_err());
}

/// A log of 60 puts over several 4 KiB files, closed; the time stamps of its records, and its
/// files' records: `(offset, ts)` each, by file.
fn log_of_several_files(dir: &Path) -> (Vec<u64>, Vec<Vec<(usize, u64)>>) {
    let mut c = cfg(dir, 1);
    c.file_size = 4096;
    let log = Ulog::open(c).unwrap();
    let v = vec![3u8; 200];
    let ts: Vec<u64> = (0..60u32)
        .map(|i| {
            log.append(&Op::Put {
                key: &i.to_be_bytes(),
                value: &v,
                flags: 0,
                expires: 0,
            })
            .unwrap()
        })
        .collect();
    log.close().unwrap();
    drop(log);
    let files = list(&OsVfs, &dir.join("ulog")).unwrap();
    assert!(files.len() >= 3, "rotated: {}", files.len());
    let recs = files
        .iter()
        .map(|f| {
            let data = fs::read(dir.join("ulog").join(file_name(f.idx))).unwrap();
            let mut at = f.hdr as usize;
            let mut out = Vec::new();
            while let Ok(record::Next::Record(r, n)) = record::decode(&data[at..]) {
                out.push((at, r.ts));
                at += n;
            }
            out
        })
        .collect();
    (ts, recs)
}

/// Give the record at `at` of log file `idx` the time stamp `ts`, its crc made good as a writer
/// would have written it.
fn restamp_at(dir: &Path, idx: u64, at: usize, ts: u64) {
    let path = dir.join("ulog").join(file_name(idx));
    let mut data = fs::read(&path).unwrap();
    let record::Next::Record(_, n) = record::decode(&data[at..]).unwrap() else {
        panic!("no record at {at}")
    };
    record::restamp(&mut data[at..at + n], ts);
    fs::write(&path, &data).unwrap();
}

/// Every record a live reader returns after `after`, until it ends or fails.
fn read_all(log: &Arc<Ulog>, after: u64) -> (Vec<u64>, Result<()>) {
    let Start::Reader(mut r) = log.reader(after).unwrap() else {
        panic!("behind")
    };
    let mut seen = Vec::new();
    loop {
        match r.next(Duration::ZERO) {
            Ok(Some(b)) => {
                let record::Next::Record(rec, _) = record::decode(b).unwrap() else {
                    panic!("incomplete")
                };
                seen.push(rec.ts);
            }
            Ok(None) => return (seen, Ok(())),
            Err(e) => return (seen, Err(e)),
        }
    }
}

fn assert_out_of_order(r: Result<impl std::fmt::Debug>, file: &str, at: usize) {
    match r {
        Err(Error::Corrupt(m)) => assert!(
            m.contains(file) && m.contains(&format!("time stamps out of order at offset {at} ")),
            "{m}"
        ),
        other => panic!("damage not reported: {other:?}"),
    }
}

/// Two records out of order in an older (sealed) file are damage for every reader of the log:
/// the live reader (replication feeds), `read_dir` (`kura db ulog`, restores) and `replay`
/// (point-in-time restores), which name the file and the offset; none skips the record (a
/// replica or a restore would miss the change). Readers whose start position lies past the
/// damaged file read as before.
#[test]
fn records_out_of_order_in_an_older_file_are_damage_for_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (ts, recs) = log_of_several_files(dir.path());
    // The second and third records of the first file swap their time stamps.
    let ((a, ta), (b, tb)) = (recs[0][1], recs[0][2]);
    restamp_at(dir.path(), 1, a, tb);
    restamp_at(dir.path(), 1, b, ta);
    let name = file_name(1);
    // Only the newest file is scanned at open: the log opens.
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let (seen, r) = read_all(&log, 0);
    assert_eq!(seen, [ts[0], tb], "the records before the damage");
    assert_out_of_order(r, &name, b);
    // From a position inside the damaged file, before the damage or after it.
    for after in [ts[0], tb] {
        assert_out_of_order(read_all(&log, after).1, &name, b);
    }
    let ulog = dir.path().join("ulog");
    let mut n = 0;
    let r = read_dir(&ulog, 0, u64::MAX, &mut |_| {
        n += 1;
        Ok(())
    });
    assert_out_of_order(r, &name, b);
    let store = crate::open("*").unwrap();
    assert_out_of_order(apply::replay(&*store, &ulog, 0, u64::MAX), &name, b);
    assert_eq!(store.count(), 0, "nothing of a damaged log applied");
    // A reader starting past the damaged file: every record after its position, unchanged.
    let from = recs[0].last().unwrap().1;
    let after: Vec<u64> = ts.iter().copied().filter(|&t| t > from).collect();
    let (seen, r) = read_all(&log, from);
    r.unwrap();
    assert_eq!(seen, after);
    let mut seen = Vec::new();
    read_dir(&ulog, from, u64::MAX, &mut |r| {
        seen.push(r.ts);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, after);
    let (n, last) = apply::replay(&*store, &ulog, from, u64::MAX).unwrap();
    assert_eq!((n as usize, last), (after.len(), *ts.last().unwrap()));
    log.close().unwrap();
}

/// A file whose last record is after the time stamp the next file's header says its records
/// follow (`prev_ts`) is damage at the boundary: reported, and the next file's first records
/// are not skipped as "already read".
#[test]
fn a_file_ending_after_the_next_files_start_is_damage_for_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (ts, recs) = log_of_several_files(dir.path());
    // The first file's last record stamped as the second file's first.
    let (at, _) = *recs[0].last().unwrap();
    let next_first = recs[1][0].1;
    restamp_at(dir.path(), 1, at, next_first);
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let want = format!(
        "{}: time stamps out of order: its last record ({next_first})",
        file_name(1)
    );
    let (seen, r) = read_all(&log, 0);
    assert_eq!(seen.len(), recs[0].len());
    assert_eq!(seen.last(), Some(&next_first));
    match r {
        Err(Error::Corrupt(m)) => assert!(m.contains(&want) && m.contains(&file_name(2)), "{m}"),
        other => panic!("damage not reported: {other:?}"),
    }
    let r = read_dir(&dir.path().join("ulog"), ts[0], u64::MAX, &mut |_| Ok(()));
    match r {
        Err(Error::Corrupt(m)) => assert!(m.contains(&want), "{m}"),
        other => panic!("damage not reported: {other:?}"),
    }
    log.close().unwrap();
}

/// A torn slot write leaves the other slot's synced length; with both slots damaged the file
/// is read as one of the format before, and the log goes on in a new file.
#[test]
fn a_damaged_synced_length_slot_leaves_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    for i in 0..4u8 {
        log.append(&Op::Remove { key: &[i] }).unwrap();
        log.sync().unwrap();
    }
    log.close().unwrap();
    drop(log);
    let file = dir.path().join("ulog").join(file_name(1));
    let data = fs::read(&file).unwrap();
    let (h, _) = read_header(&OsVfs, &file).unwrap();
    let end = records_end(&data, FILE_HEADER as usize) as u64;
    assert_eq!(h.synced, Some(end));
    // The slot written last torn: the other one's length (the sync before) counts.
    let last = SLOTS[(h.slot_writes % 2) as usize];
    let f = OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(&[0xee; 5], last as u64 + 3).unwrap();
    let (h2, _) = read_header(&OsVfs, &file).unwrap();
    assert!(
        h2.synced.is_some_and(|s| s < end && s > FILE_HEADER),
        "{:?}",
        h2.synced
    );
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    assert_eq!(log.torn_tail, 0);
    assert_eq!(log.span().0, 1);
    log.close().unwrap();
    drop(log);
    // Both damaged.
    let f = OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(&[0xee; 32], 32).unwrap();
    assert_eq!(read_header(&OsVfs, &file).unwrap().0.synced, None);
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    assert_eq!(log.span().0, 2, "goes on in a new file");
    let mut n = 0;
    log.close().unwrap();
    read_dir(&dir.path().join("ulog"), 0, u64::MAX, &mut |_| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 4);
}

/// A hole past the synced length (a write-back out of file order, then a power loss) is a
/// torn tail: the records after it were never synced, and are dropped.
#[test]
fn a_hole_past_the_synced_length_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let a = log.append(&Op::Remove { key: b"a" }).unwrap();
    log.close().unwrap();
    drop(log);
    let file = dir.path().join("ulog").join(file_name(1));
    let data = fs::read(&file).unwrap();
    let synced = records_end(&data, FILE_HEADER as usize) as u64;
    // Three records appended after the sync; the first one's bytes never reached the disk.
    let mut more = Vec::new();
    for (i, k) in [b"b", b"c", b"d"].iter().enumerate() {
        let ts = a + 1 + i as u64;
        record::encode(&mut more, ts, 1, ts, &Op::Remove { key: *k });
    }
    let mut first = Vec::new();
    record::encode(&mut first, a + 1, 1, a + 1, &Op::Remove { key: b"b" });
    more[..first.len()].fill(0);
    let f = OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all_at(&more, synced).unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    assert_eq!(
        log.torn_tail,
        more.len() as u64,
        "the hole and the records after it"
    );
    assert_eq!(log.last_ts(), a);
    log.close().unwrap();
    drop(log);
    let mut seen = Vec::new();
    read_dir(&dir.path().join("ulog"), 0, u64::MAX, &mut |r| {
        seen.push(r.ts);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, [a]);
}

/// A log written by the format before (`KURAULG1`, a 32-byte header without synced lengths)
/// opens: its records are read as they are, damage with intact records after it is still
/// refused, and the log goes on in a new file of the current format.
#[test]
fn files_of_the_format_before_open() {
    let dir = tempfile::tempdir().unwrap();
    let ulog = dir.path().join("ulog");
    fs::create_dir_all(&ulog).unwrap();
    let mut data = vec![0u8; 32];
    data[0..8].copy_from_slice(b"KURAULG1");
    data[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32c::crc32c(&data[0..28]);
    data[28..32].copy_from_slice(&crc.to_le_bytes());
    for ts in 1..=5u64 {
        record::encode(
            &mut data,
            ts * 10,
            1,
            ts * 10,
            &Op::Remove { key: &[ts as u8] },
        );
    }
    let end = data.len();
    // The preallocated end of the old writer's file, and a torn record in it.
    data.resize(end + 4096, 0);
    data[end..end + 5].copy_from_slice(&[9, 0, 0, 0, 1]);
    let old = ulog.join(file_name(1));
    fs::write(&old, &data).unwrap();
    // Damage with intact records after it, in the old file: refused.
    let mut bad = data.clone();
    bad[40] ^= 1;
    fs::write(&old, &bad).unwrap();
    assert!(matches!(
        Ulog::open(cfg(dir.path(), 1)),
        Err(Error::Corrupt(_))
    ));
    fs::write(&old, &data).unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    assert_eq!(log.torn_tail, 5);
    assert_eq!(log.last_ts(), 50);
    assert_eq!(log.span().0, 2, "a new file after the old one");
    let t = log.append(&Op::Vanish).unwrap();
    let Start::Reader(mut r) = log.reader(0).unwrap() else {
        panic!("behind")
    };
    let mut seen = Vec::new();
    while let Some(b) = r.next(Duration::from_millis(20)).unwrap() {
        let record::Next::Record(rec, _) = record::decode(b).unwrap() else {
            panic!("incomplete")
        };
        seen.push(rec.ts);
    }
    assert_eq!(seen, [10, 20, 30, 40, 50, t]);
    log.close().unwrap();
    drop(log);
    assert_eq!(
        fs::read(&old).unwrap().len(),
        end,
        "the old file cut to its records"
    );
    let new = fs::read(ulog.join(file_name(2))).unwrap();
    assert_eq!(&new[0..8], b"KURAULG2");
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    assert_eq!(log.torn_tail, 0);
    assert_eq!(log.span().0, 2);
    drop(log);
    let mut seen = Vec::new();
    read_dir(&ulog, 0, u64::MAX, &mut |r| {
        seen.push(r.ts);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, [10, 20, 30, 40, 50, t]);
}

#[test]
fn readers_follow_rotation_and_retention_says_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path(), 1);
    c.file_size = 4096;
    c.limit = 64 << 10;
    c.keep = Duration::ZERO;
    let log = Ulog::open(c).unwrap();
    let Start::Reader(mut r) = log.reader(0).unwrap() else {
        panic!()
    };
    let mut last = 0;
    let v = vec![7u8; 200];
    for i in 0..100u32 {
        last = log
            .append(&Op::Put {
                key: &i.to_be_bytes(),
                value: &v,
                flags: 0,
                expires: 0,
            })
            .unwrap();
    }
    let mut n = 0;
    while r.next(Duration::from_millis(10)).unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 100);
    assert_eq!(r.position(), last);
    assert!(log.span().0 > 3, "rotated");
    for i in 0..400u32 {
        log.append(&Op::Put {
            key: &i.to_be_bytes(),
            value: &v,
            flags: 0,
            expires: 0,
        })
        .unwrap();
    }
    log.purge().unwrap();
    assert!(log.size() <= (64 << 10) + 8192, "capped: {}", log.size());
    assert!(matches!(log.reader(1).unwrap(), Start::Behind { .. }));
    // A known replica that confirmed nothing does not hold files past the cap.
    log.confirm(9, 0, "r", false);
    assert!(log.replicas().contains_key(&9));
}

#[test]
fn retention_keeps_what_a_replica_has_not_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path(), 1);
    c.file_size = 4096;
    c.limit = 0;
    c.keep = Duration::ZERO;
    let log = Ulog::open(c).unwrap();
    log.confirm(2, 0, "r", true);
    let v = vec![1u8; 500];
    let mut mid = 0;
    for i in 0..100u32 {
        let ts = log
            .append(&Op::Put {
                key: &i.to_be_bytes(),
                value: &v,
                flags: 0,
                expires: 0,
            })
            .unwrap();
        if i == 50 {
            mid = ts;
        }
    }
    assert_eq!(log.purge().unwrap(), 0, "the replica confirmed nothing");
    log.confirm(2, mid, "r", true);
    assert!(log.purge().unwrap() > 0);
    assert!(matches!(log.reader(mid).unwrap(), Start::Reader(_)));
    assert!(matches!(log.reader(0).unwrap(), Start::Behind { .. }));
}

#[test]
fn records_logged_but_not_applied_are_redone_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.kh").display().to_string();
    {
        let inner = crate::open(&path).unwrap();
        let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
        let db = Logged::new(inner, log.clone()).unwrap();
        db.put(b"kept", b"1").unwrap();
        db.close().unwrap();
    }
    {
        // As if the process died between logging and applying.
        let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
        log.append(&Op::Put {
            key: b"lost",
            value: b"2",
            flags: 0,
            expires: 0,
        })
        .unwrap();
        log.append(&Op::Remove { key: b"kept" }).unwrap();
        log.close().unwrap();
    }
    let inner = crate::open(&path).unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let db = Logged::new(inner, log).unwrap();
    assert_eq!(db.redone, 2);
    assert_eq!(db.get(b"lost").unwrap().unwrap().value, b"2");
    assert!(db.get(b"kept").unwrap().is_none());
}

#[test]
fn two_masters_converge_on_concurrent_writes_of_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let la = Ulog::open(Config {
        sync: SyncMode::None,
        ..Config::new(dir.path().join("a"), 1)
    })
    .unwrap();
    let lb = Ulog::open(Config {
        sync: SyncMode::None,
        ..Config::new(dir.path().join("b"), 2)
    })
    .unwrap();
    let a = Logged::new(crate::open("*").unwrap(), la.clone()).unwrap();
    let b = Logged::new(crate::open("*").unwrap(), lb.clone()).unwrap();
    a.set_lww(true);
    b.set_lww(true);
    // Both write the same keys before either hears of the other's writes.
    for i in 0..50u32 {
        a.put(&(i % 7).to_be_bytes(), format!("a{i}").as_bytes())
            .unwrap();
        b.put(&(i % 7).to_be_bytes(), format!("b{i}").as_bytes())
            .unwrap();
        if i % 10 == 0 {
            a.out(&3u32.to_be_bytes()).unwrap();
        }
    }
    let ship = |from: &Arc<Ulog>, to: &Logged, after: u64| {
        let Start::Reader(mut r) = from.reader(after).unwrap() else {
            panic!()
        };
        while let Some(bytes) = r.next(Duration::from_millis(20)).unwrap() {
            let record::Next::Record(rec, _) = record::decode(bytes).unwrap() else {
                panic!()
            };
            to.apply_remote(&rec).unwrap();
        }
        r.position()
    };
    let (pa, pb) = (la.last_ts(), lb.last_ts());
    ship(&la, &b, 0);
    ship(&lb, &a, 0);
    // Records relogged on the other side come back and are skipped as loops.
    ship(&la, &b, pa);
    ship(&lb, &a, pb);
    assert_eq!(digest(&*a), digest(&*b));
}

#[test]
fn commands_run_as_another_origin_log_their_effects_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 5)).unwrap();
    let db = Logged::new(crate::open("*").unwrap(), log.clone()).unwrap();
    db.put(b"a", b"x").unwrap();
    let before = log.last_ts();
    // A command replayed from server 9's log, at its time stamp 1234.
    let r = db
        .as_origin(9, 1234, |s| {
            s.putcat(b"a", b"yz")?;
            s.addint(b"n", 3)
        })
        .unwrap();
    assert_eq!(r, Some(3));
    // Its own server's commands are not run again.
    assert_eq!(db.as_origin(5, 1, |s| s.put(b"a", b"no")).unwrap(), None);
    // Afterwards, writes are this server's again.
    db.put(b"b", b"1").unwrap();
    let Start::Reader(mut r) = log.reader(before).unwrap() else {
        panic!("behind")
    };
    let mut seen = Vec::new();
    while let Some(b) = r.next(Duration::from_millis(20)).unwrap() {
        let record::Next::Record(rec, _) = record::decode(b).unwrap() else {
            panic!("incomplete")
        };
        let what = match rec.op {
            Op::Put { key, value, .. } => format!("{}={}", str(key), str(value)),
            other => format!("{other:?}"),
        };
        seen.push((what, rec.origin_sid, rec.origin_ts == 1234));
    }
    fn str(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }
    assert_eq!(
        seen,
        [
            ("a=xyz".to_string(), 9, true),
            // addint's value: a 4-byte little-endian int, as Tyrant stores it.
            ("n=\u{3}\0\0\0".to_string(), 9, true),
            ("b=1".to_string(), 5, false),
        ]
    );
    assert_eq!(db.get(b"a").unwrap().unwrap().value, b"xyz");
}

/// `sync=always` through `Logged` over a `sync=always` database: eight writers share each of
/// the log's fsyncs (its group commit), and the database is not synced for a write (the log is
/// the commit point).
#[test]
fn writers_share_the_log_fsyncs_and_the_database_is_not_synced_per_write() {
    use crate::io::SimVfs;
    let fs = SimVfs::new();
    fs.set_sync_delay(Duration::from_millis(3));
    let vfs: Arc<dyn crate::io::Vfs> = Arc::new(fs.clone());
    let db = crate::hash::DiskHash::open_with(
        Path::new("/s/d.kh"),
        &crate::Params::parse("sync=always").unwrap(),
        vfs.clone(),
        false,
    )
    .unwrap();
    let mut c = Config::new("/s/ulog", 1);
    c.sync = SyncMode::Always;
    c.file_size = 1 << 20;
    c.vfs = vfs;
    let log = Ulog::open(c).unwrap();
    let db = Logged::new(Arc::new(db), log.clone()).unwrap();
    let count = |name: &str| {
        db.counters()
            .iter()
            .find(|c| c.0 == name)
            .map_or(0, |c| c.1)
    };
    // One write first: the database's first segment (its header synced) is made before the
    // count starts.
    db.put(b"warm", b"v").unwrap();
    let (db0, log0) = (count("syncs"), log.sync_count());
    std::thread::scope(|s| {
        for t in 0..8 {
            let db = &db;
            s.spawn(move || {
                for i in 0..40 {
                    db.put(format!("t{t}-{i}").as_bytes(), b"v").unwrap();
                }
            });
        }
    });
    let (db_syncs, log_syncs) = (count("syncs") - db0, log.sync_count() - log0);
    assert!(
        log_syncs * 4 <= 320,
        "{log_syncs} log fsyncs for 320 writes"
    );
    assert!(db_syncs <= 2, "{db_syncs} database syncs for 320 writes");
    db.close().unwrap();
}

/// The name a `Logged` database is opened by: a persistent kind's `sync=` goes to the log and
/// the database gets `sync=none`; a memory kind's name is kept (its open refuses `sync=`).
#[test]
fn database_name_gives_the_sync_mode_to_the_log() {
    use super::logged::database_name;
    let (n, s) = database_name("a.kh#bnum=10#sync=always#msiz=1m").unwrap();
    assert_eq!(n, "a.kh#bnum=10#msiz=1m#sync=none");
    assert_eq!(s, SyncMode::Always);
    let (n, s) = database_name("a.kb").unwrap();
    assert_eq!((n.as_str(), s), ("a.kb#sync=none", SyncMode::DEFAULT));
    let (n, s) = database_name("*#capnum=5").unwrap();
    assert_eq!((n.as_str(), s), ("*#capnum=5", SyncMode::DEFAULT));
    assert!(database_name("a.kh#sync=sometimes").is_err());
}

/// A table under an update log: rows written through the table operations are logged as
/// their wire forms, and a replica table that follows the log holds the same rows, its own
/// index agreeing with them.
#[test]
fn table_rows_replicate_and_the_replica_indexes_them() {
    use crate::table::{Columns, IndexOp, IndexType, PutMode};
    let dir = tempfile::tempdir().unwrap();
    let inner = crate::open(&dir.path().join("t.kt").display().to_string()).unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    let db = Logged::new(inner, log.clone()).unwrap();
    let t = db.table().expect("a logged table is a table");
    let cols = |p: &[(&str, &str)]| Columns::from_pairs(p).unwrap();
    t.put_row(b"a", &cols(&[("n", "1"), ("w", "x y")]), PutMode::Replace)
        .unwrap();
    assert!(!t
        .put_row(b"a", &cols(&[("n", "9")]), PutMode::Keep)
        .unwrap());
    t.put_row(b"a", &cols(&[("n", "2"), ("z", "3")]), PutMode::Cat)
        .unwrap();
    t.put_row(b"b", &cols(&[("n", "3")]), PutMode::Replace)
        .unwrap();
    t.out_row(b"b").unwrap();
    let rd = dir.path().join("r.kt").display().to_string();
    let replica = crate::open(&rd).unwrap();
    let rt = replica.table().unwrap();
    rt.set_index(
        b"n",
        IndexOp::Make {
            typ: IndexType::Decimal,
            keep: false,
        },
    )
    .unwrap();
    follow(&log, 0, &*replica);
    assert_eq!(
        rt.get_row(b"a").unwrap().unwrap(),
        cols(&[("n", "1"), ("w", "x y"), ("z", "3")])
    );
    assert_eq!(rt.get_row(b"b").unwrap(), None);
    assert_eq!(rt.indexes()[0].entries, 1);
    assert!(rt.check_indexes().unwrap().is_empty());
    db.close().unwrap();
    replica.close().unwrap();
}

/// The background thread writes zeros over the pages ahead of the records, and unmaps, starts
/// the write-back of and drops from the cache the pages behind them, while writers append
/// through the mapping: no record is overwritten or lost, across rotations, and the pages
/// ahead were filled.
#[test]
fn zeros_written_ahead_and_write_back_behind_keep_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path(), 1);
    c.file_size = 3 << 20;
    c.limit = 0;
    let log = Ulog::open(c.clone()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let helper = {
        let (log, stop) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                log.prefault();
                log.write_back();
            }
        })
    };
    let writers: Vec<_> = (0..2u32)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..6000u32 {
                    let v = vec![(i % 251) as u8 + 1; 300 + (i % 700) as usize];
                    log.append(&Op::Put {
                        key: &[t.to_be_bytes(), i.to_be_bytes()].concat(),
                        value: &v,
                        flags: 0,
                        expires: 0,
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    helper.join().unwrap();
    let populated = log.w.lock().populated;
    assert!(populated > log.w.lock().size, "filled ahead: {populated}");
    assert!(log.span().0 > 2, "rotated");
    log.close().unwrap();
    drop(log);
    let log = Ulog::open(c).unwrap();
    assert_eq!(log.torn_tail, 0);
    let Start::Reader(mut r) = log.reader(0).unwrap() else {
        panic!("behind")
    };
    let mut next = [0u32; 2];
    while let Some(b) = r.next(Duration::from_millis(10)).unwrap() {
        let record::Next::Record(rec, _) = record::decode(b).unwrap() else {
            panic!("incomplete")
        };
        let Op::Put { key, value, .. } = rec.op else {
            panic!("{:?}", rec.op)
        };
        let t = u32::from_be_bytes(key[0..4].try_into().unwrap()) as usize;
        let i = u32::from_be_bytes(key[4..8].try_into().unwrap());
        assert_eq!(i, next[t], "writer {t}'s records in order");
        assert_eq!(value, vec![(i % 251) as u8 + 1; 300 + (i % 700) as usize]);
        next[t] += 1;
    }
    assert_eq!(next, [6000, 6000]);
}

/// A writer waiting for the zeros being written ahead (`fill_from`) lets other writers in: a
/// smaller record that fits below them is appended meanwhile. The waiting writer's record,
/// appended after it, still takes a later time stamp, so a reader (which skips records not
/// after its position) returns both.
#[test]
fn a_writer_waiting_for_the_zeros_ahead_takes_its_time_stamp_after_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    log.append(&Op::Remove { key: b"first" }).unwrap();
    // Zeros "being written" from 200 bytes past the records (set while none are).
    loop {
        let mut w = log.w.lock();
        if w.fill_from == NO_FILL {
            w.fill_from = w.size + 200;
            break;
        }
        drop(w);
        std::thread::sleep(Duration::from_millis(1));
    }
    let big = {
        let log = log.clone();
        std::thread::spawn(move || {
            log.append(&Op::Put {
                key: b"big",
                value: &[7; 1000],
                flags: 0,
                expires: 0,
            })
            .unwrap()
        })
    };
    // The big record's writer holds the encoding buffer while it waits.
    while log.w.lock().buf.capacity() != 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(2));
    let small = log.append(&Op::Remove { key: b"small" }).unwrap();
    log.w.lock().fill_from = NO_FILL;
    log.fill_cv.notify_all();
    let big = big.join().unwrap();
    assert!(big > small, "time stamps in file order: {small} then {big}");
    let Start::Reader(mut r) = log.reader(0).unwrap() else {
        panic!("behind")
    };
    let mut keys = Vec::new();
    while let Some(b) = r.next(Duration::from_millis(10)).unwrap() {
        let record::Next::Record(rec, _) = record::decode(b).unwrap() else {
            panic!("incomplete")
        };
        keys.push(match rec.op {
            Op::Put { key, .. } | Op::Remove { key } => key.to_vec(),
            op => panic!("{op:?}"),
        });
    }
    assert_eq!(keys, [&b"first"[..], b"small", b"big"]);
    log.close().unwrap();
}

/// A server thread whose replies wait for replicas reads back the position of the last record
/// it appended (`--sync-replicas`); another thread's records are not its own.
#[test]
fn a_thread_reads_back_the_position_of_the_records_it_appended() {
    let dir = tempfile::tempdir().unwrap();
    let log = Ulog::open(cfg(dir.path(), 1)).unwrap();
    crate::durability::take_logged();
    let a = log.append(&Op::Remove { key: b"a" }).unwrap();
    let b = log.append(&Op::Remove { key: b"b" }).unwrap();
    assert!(b > a);
    let other = log.clone();
    std::thread::spawn(move || {
        other.append(&Op::Remove { key: b"c" }).unwrap();
        crate::durability::take_logged()
    })
    .join()
    .unwrap();
    assert_eq!(crate::durability::logged(), b);
    assert_eq!(crate::durability::take_logged(), b);
    assert_eq!(crate::durability::take_logged(), 0);
}
