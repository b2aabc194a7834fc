//! What a fixed-length database stores about itself (the descriptor `kura.meta`, kind
//! `fixed`): `width` and `limsiz`, as Tokyo Cabinet stores them in its header (`limsiz` raised
//! and rounded by `tcfdbtune`), chosen at creation and changed only by `optimize`. An open
//! that gives other values is refused; everything else (`sync`, `segsiz`, `bufsiz`, `msiz`,
//! `compact`, `ckptsiz`) tunes one open and is not stored.

use super::id;
use crate::error::{Error, Result};
use crate::log::segment::parse_seg_file_name;
use crate::meta::{self, Descriptor};
use std::path::Path;

/// The descriptor's kind for this database kind.
pub const KIND: &str = "fixed";

/// Whether `name` is one of the files a fixed-length database keeps in its directory.
pub fn own_file(name: &str) -> bool {
    matches!(
        name,
        "LOCK"
            | "index.kfi"
            | "index.kfi.tmp"
            | "data.kfd"
            | "data.kfd.tmp"
            | "dw.kfd"
            | "side.kfs"
            | "side.kfs.tmp"
            | meta::META_NAME
            | meta::META_TMP
    ) || parse_seg_file_name(name).is_some()
}

/// The stored parameters, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    pub width: u64,
    pub limsiz: u64,
}

impl Stored {
    /// The id limit they give.
    pub fn limid(&self) -> u64 {
        id::limid(self.width, self.limsiz)
    }

    pub fn from_descriptor(d: &Descriptor, dir: &Path) -> Result<Stored> {
        let bad = |what: String| {
            Error::Corrupt(format!("{}: {what}", dir.join(meta::META_NAME).display()))
        };
        if d.kind != KIND {
            return Err(Error::NotADatabase(format!(
                "{} is a Kura database of kind `{}`, not a fixed-length database",
                dir.display(),
                d.kind
            )));
        }
        let (mut width, mut limsiz) = (None, None);
        for (k, v) in &d.params {
            let n = || v.parse::<u64>().map_err(|_| bad(format!("bad {k} `{v}`")));
            match k.as_str() {
                "width" => width = Some(n()?),
                "limsiz" => limsiz = Some(n()?),
                other => return Err(bad(format!("unknown stored parameter `{other}`"))),
            }
        }
        let (Some(width), Some(limsiz)) = (width, limsiz) else {
            return Err(bad("no width or no limsiz".into()));
        };
        // Stored as tuned: tuning them again changes nothing.
        match id::tune(width, limsiz) {
            Ok(t) if t == (width, limsiz) => Ok(Stored { width, limsiz }),
            _ => Err(bad(format!(
                "width {width} and limsiz {limsiz} are not possible"
            ))),
        }
    }

    pub fn descriptor(&self) -> Descriptor {
        let mut d = Descriptor::new(KIND);
        d.set("width", self.width);
        d.set("limsiz", self.limsiz);
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_files() {
        for n in [
            "LOCK",
            "index.kfi",
            "index.kfi.tmp",
            "data.kfd",
            "dw.kfd",
            "side.kfs",
            "kura.meta",
            "seg-00000001.kd",
        ] {
            assert!(own_file(n), "{n}");
        }
        for n in ["index.ki", "notes.txt", "seg-x.kd"] {
            assert!(!own_file(n), "{n}");
        }
    }

    #[test]
    fn stored_parameters_round_trip_and_bad_ones_are_corrupt() {
        let dir = Path::new("/x.kf");
        let s = Stored {
            width: 10,
            limsiz: 4096,
        };
        assert_eq!(s.limid(), 349);
        let d = s.descriptor();
        assert_eq!(Stored::from_descriptor(&d, dir).unwrap(), s);
        for (k, v) in [
            ("width", "0"),
            ("width", "x"),
            ("limsiz", "1000"),
            ("limsiz", "-1"),
            ("extra", "1"),
        ] {
            let mut e = d.clone();
            e.set(k, v);
            match Stored::from_descriptor(&e, dir) {
                Err(Error::Corrupt(m)) => assert!(m.contains("/x.kf/kura.meta"), "{m}"),
                other => panic!("{k}={v}: {other:?}"),
            }
        }
        let mut other = d.clone();
        other.kind = "hash".into();
        assert!(matches!(
            Stored::from_descriptor(&other, dir),
            Err(Error::NotADatabase(_))
        ));
    }
}
