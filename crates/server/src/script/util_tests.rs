use super::*;
use crate::context::Shared;
use crate::mask::Proto;
use crate::script::{with_interp, Ctx, Flavor, ScriptConf, Scripts};
use kura_engine::name;
use std::io::Write as _;

/// Run `code` (a Lua chunk returning a value) in a call of a Tyrant interpreter with the
/// shared helpers installed (`kt` is a table with Kyoto Tycoon's), on a server with `shared`.
fn eval_with<R: mlua::FromLua>(shared: &Shared, code: &str) -> Result<R, String> {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"-- empty\n").unwrap();
    let s = Scripts::load(ScriptConf {
        ext: Some(f.path().to_path_buf()),
        timeout: std::time::Duration::from_millis(300),
        ..ScriptConf::default()
    })
    .unwrap();
    let db = name::open("*").unwrap();
    with_interp(
        &s,
        Flavor::Tyrant,
        Ctx {
            store: &*db,
            shared,
            proto: Proto::Tyrant,
        },
        |lua| {
            install_tyrant(lua)?;
            let kt = lua.create_table()?;
            install_kyoto(lua, &kt)?;
            lua.globals().set("kt", kt)?;
            lua.load(code).eval::<R>()
        },
    )
    .map_err(|e| e.to_string())
}

fn eval<R: mlua::FromLua>(code: &str) -> Result<R, String> {
    eval_with(&Shared::new(0, 1 << 20), code)
}

#[test]
fn lua_smoke() {
    assert_eq!(
        eval::<String>("return _codec('hex', 'ab')").unwrap(),
        "6162"
    );
    assert_eq!(
        eval::<String>("return table.concat(_unpack('n*', _pack('n*', 1, {2, 3})), ',')").unwrap(),
        "1,2,3"
    );
    assert_eq!(
        eval::<String>("return kt.codec('~base', kt.codec('base', 'hello'))").unwrap(),
        "hello"
    );
    assert_eq!(
        eval::<String>("return _hash('md5', 'abc')").unwrap(),
        "900150983cd24fb0d6963f7d28e17f72"
    );
    assert_eq!(
        eval::<f64>("return _hash('crc32', '123456789')").unwrap(),
        3421780262.0
    );
    assert_eq!(
        eval::<String>("return _regex('hello world', 'o', '[&]')").unwrap(),
        "hell[o] w[o]rld"
    );
    assert_eq!(
        eval::<String>("return kt.regex('hello world', '(o)', '<$1>')").unwrap(),
        "hell<o> w<o>rld"
    );
    let e = eval::<bool>("return _remove('x')").unwrap_err();
    assert!(
        e.contains("_remove: refused: the server has no --backup-dir"),
        "{e}"
    );
    let e = eval::<String>("return _codec('tcbs', 'x')").unwrap_err();
    assert!(e.contains("not supported"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// fixed cases

#[test]
fn md5_matches_rfc_1321s_test_suite() {
    for (input, hex) in [
        ("", "d41d8cd98f00b204e9800998ecf8427e"),
        ("a", "0cc175b9c0f1b6a831c399e269772661"),
        ("abc", "900150983cd24fb0d6963f7d28e17f72"),
        ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
        (
            "abcdefghijklmnopqrstuvwxyz",
            "c3fcd3d76192e4007dfb496cca67e13b",
        ),
        (
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            "d174ab98d277d9f5a5611c2c9f419d9f",
        ),
        (
            "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
            "57edf4a22be3c955ac49da2e2107b67a",
        ),
    ] {
        assert_eq!(
            hex_encode(&md5(input.as_bytes())),
            hex.as_bytes(),
            "{input}"
        );
    }
}

/// CRC-32 from its definition: the reflected polynomial 0xEDB88320, a bit at a time.
fn crc32_model(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// MurmurHash64A (Austin Appleby's definition) with Kyoto Cabinet's seed, written over
/// 128-bit arithmetic and a padded tail, apart from the implementation under test.
fn murmur_model(data: &[u8]) -> u64 {
    const M: u128 = 0xc6a4a7935bd1e995;
    let wrap = |x: u128| x % (1u128 << 64);
    let mut h: u128 = (19780211u128 ^ wrap(data.len() as u128 * M)) % (1 << 64);
    let whole = data.len() / 8 * 8;
    for i in (0..whole).step_by(8) {
        let mut k: u128 = 0;
        for j in (0..8).rev() {
            k = k << 8 | u128::from(data[i + j]);
        }
        k = wrap(k * M);
        k ^= k >> 47;
        k = wrap(k * M);
        h = wrap(h * M);
        h ^= k;
    }
    let tail = &data[whole..];
    if !tail.is_empty() {
        let mut t: u128 = 0;
        for (j, &b) in tail.iter().enumerate() {
            t |= u128::from(b) << (8 * j);
        }
        h ^= t;
        h = wrap(h * M);
    }
    h ^= h >> 47;
    h = wrap(h * M);
    h ^= h >> 47;
    h as u64
}

/// Kyoto Cabinet's FNV: FNV-1a's offset basis with the multiplier 109951162811 (Kyoto
/// Cabinet's, not FNV's 1099511628211), over 128-bit arithmetic.
fn fnv_model(data: &[u8]) -> u64 {
    let mut h: u128 = 14695981039346656037;
    for &b in data {
        h = ((h ^ u128::from(b)) * 109951162811) % (1 << 64);
    }
    h as u64
}

#[test]
fn hashes_agree_with_their_definitions_on_fixed_inputs() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
    assert_eq!(hash_fnv(b""), 14695981039346656037);
    // One byte by hand: (basis ^ 'a') * 109951162811 mod 2^64.
    assert_eq!(
        hash_fnv(b"a"),
        (14695981039346656037u64 ^ 0x61).wrapping_mul(109951162811)
    );
    for s in [
        &b""[..],
        b"a",
        b"abcdefg",
        b"abcdefgh",
        b"abcdefghi",
        b"hello, world!",
    ] {
        assert_eq!(hash_murmur(s), murmur_model(s));
        assert_eq!(hash_fnv(s), fnv_model(s));
        assert_eq!(crc32(s), crc32_model(s));
    }
    // Kyoto Tycoon hands a script the low 48 bits.
    let v = eval::<f64>("return kt.hash_murmur('hello')").unwrap();
    assert_eq!(v as u64, hash_murmur(b"hello") & KT_HASH_MASK);
    let v = eval::<f64>("return kt.hash_fnv('hello')").unwrap();
    assert_eq!(v as u64, hash_fnv(b"hello") & KT_HASH_MASK);
}

#[test]
fn pack_follows_perls_formats() {
    assert_eq!(pack(b"C3", &[1.0, 2.0, 3.0, 4.0]), [1, 2, 3]);
    assert_eq!(pack(b"c", &[-1.0]), [0xff]);
    assert_eq!(pack(b"n", &[0x1234 as f64]), [0x12, 0x34]);
    assert_eq!(pack(b"N", &[0x12345678 as f64]), [0x12, 0x34, 0x56, 0x78]);
    assert_eq!(pack(b"S", &[0x1234 as f64]), [0x34, 0x12]);
    assert_eq!(pack(b"w", &[300.0]), [0x82, 0x2c]);
    assert_eq!(pack(b"w*", &[0.0, 127.0, 128.0]), [0x00, 0x7f, 0x81, 0x00]);
    // Values run out before the format: packing stops.
    assert_eq!(pack(b"CCC", &[7.0]), [7]);
    assert_eq!(unpack(b"C*", &[1, 2, 3]), [1.0, 2.0, 3.0]);
    assert_eq!(unpack(b"c", &[0xff]), [-1.0]);
    assert_eq!(unpack(b"N", &[0, 0, 1]), Vec::<f64>::new());
    assert_eq!(unpack(b"w*", &[0x82, 0x2c, 0x05]), [300.0, 5.0]);
    assert_eq!(unpack(b"n2C", &[0, 1, 0, 2, 9]), [1.0, 2.0, 9.0]);
    // Tables are flattened, strings read as numbers, anything else is 0.
    let s =
        eval::<String>("return table.concat(_unpack('C*', _pack('C*', {1, '2'}, 3, true)), ',')")
            .unwrap();
    assert_eq!(s, "1,2,3,0");
}

#[test]
fn split_by_delimiters_or_nul() {
    assert_eq!(split(b"a,b;;c", Some(b",;")), [&b"a"[..], b"b", b"", b"c"]);
    assert_eq!(split(b"a\0b\0", None), [&b"a"[..], b"b", b""]);
    assert_eq!(split(b"", None), [&b""[..]]);
    // With delimiters the input is a C string.
    assert_eq!(split(b"a,b\0,c", Some(b",")), [&b"a"[..], b"b"]);
}

#[test]
fn codecs_on_fixed_inputs() {
    let t = Dialect::Tyrant;
    let k = Dialect::Kyoto;
    assert_eq!(url_encode(t, b"a b/~*"), b"a%20b%2F~*");
    assert_eq!(url_encode(k, b"a b/~*"), b"a%20b%2f~%2a");
    assert_eq!(url_decode(b"a+b%41%4a%zz"), b"a bAJ");
    assert_eq!(base64_decode(b"aGVs\nbG8=junk"), b"hello");
    assert_eq!(quote_encode(b"a=b\x01\xff\r\n"), b"a=3Db=01=FF\r\n");
    assert_eq!(quote_decode(b"a=3Db=\r\nc=\nd"), b"a=bcd");
    assert_eq!(hex_decode(b"61 62 6"), b"ab`");
    assert_eq!(hex_decode(b"6162zz63"), b"ab");
    assert_eq!(
        xml_escape(b"<a href=\"x\">&</a>"),
        b"&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
    );
    assert_eq!(xml_unescape(b"&lt;&amp;&apos;&gt;"), b"<&&apos;>");
    assert_eq!(codec_named(t, b"URL"), Ok(Some(Codec::Url)));
    assert_eq!(codec_named(t, b"zlib"), Ok(None));
    assert_eq!(codec_named(k, b"zlib"), Ok(Some(Codec::RawDeflate)));
    assert_eq!(codec_named(k, b"xml"), Ok(None));
    assert!(codec_named(t, b"bzip").unwrap_err().contains("bzip2"));
    assert_eq!(codec_named(t, b"pack"), Ok(Some(Codec::PackBits)));
    // PackBits as Tokyo Cabinet writes it: runs, literals, a literal that stops before a pair.
    assert_eq!(packbits_encode(b"aaab"), [3, b'a', 1, b'b']);
    assert_eq!(packbits_encode(b"abc"), [0xfd, b'a', b'b', b'c']);
    assert_eq!(packbits_encode(b"abb"), [1, b'a', 2, b'b']);
    assert_eq!(packbits_encode(&[7; 130]), [127, 7, 3, 7]);
    assert_eq!(
        packbits_decode(&[3, b'x', 0xfe, b'y', b'z', 5]),
        Some(b"xxxyz".to_vec())
    );
    assert_eq!(packbits_decode(&[0x80, b'a']), Some(b"a".to_vec()));
    assert_eq!(codec(t, Codec::Deflate, true, b"not zlib"), None);
    assert_eq!(
        eval::<Option<String>>("return _codec('nosuch', 'x')").unwrap(),
        None
    );
    assert_eq!(
        eval::<String>("return _codec('~gzip', _codec('gzip', 'squeeze me'))").unwrap(),
        "squeeze me"
    );
}

#[test]
fn strings_regex_and_bits() {
    assert_eq!(strstr(b"hello", b"ll"), 3);
    assert_eq!(strstr(b"hello", b"x"), 0);
    assert_eq!(strstr_replace(b"a.b.c", b".", b"::").unwrap(), b"a::b::c");
    assert_eq!(strstr_replace(b"abc", b"", b"x").unwrap(), b"abc");
    assert!(strfwm(b"prefix-key", b"prefix"));
    assert!(strbwm(b"key.lua", b".lua"));
    assert!(!strbwm(b"a", b"ab"));
    let t = Dialect::Tyrant;
    let k = Dialect::Kyoto;
    assert!(regex_match(t, b"Hello", b"*^hello$"));
    assert!(!regex_match(t, b"Hello", b"^hello$"));
    assert!(!regex_match(k, b"Hello", b"*^hello$"));
    assert!(!regex_match(t, b"x", b"(unclosed"));
    assert_eq!(
        regex_replace(t, b"2024-11-28", b"([0-9]+)-([0-9]+)", b"\\2/\\1").unwrap(),
        b"11/2024-28"
    );
    assert_eq!(regex_replace(t, b"a&b", b"&", b"\\&&").unwrap(), b"a&&b");
    assert_eq!(
        regex_replace(k, b"a-b-c", b"-", b"[$&]").unwrap(),
        b"a[-]b[-]c"
    );
    assert_eq!(regex_replace(k, b"abc", b"x*", b"Y").unwrap(), b"Yabc");
    assert_eq!(regex_replace(t, b"abc", b"$", b"!").unwrap(), b"abc!");
    assert_eq!(regex_replace(t, b"abc", b"(", b"!").unwrap(), b"abc");
    assert_eq!(bit(b"AND", 0b1100, 0b1010), Some(0b1000));
    assert_eq!(bit(b"not", 0, 0), Some(u32::MAX));
    assert_eq!(bit(b"left", 1, 40), Some(0));
    assert_eq!(bit(b"nand", 1, 1), None);
    assert_eq!(eval::<f64>("return kt.bit('nand', 5, 1)").unwrap(), 5.0);
    assert!(eval::<f64>("return _bit('nand', 5, 1)")
        .unwrap_err()
        .contains("_bit: invalid arguments"));
    assert_eq!(to_u32(-1.0), u32::MAX);
    // A replacement that would grow past the limit fails the call instead of the server.
    for code in [
        "return _strstr(string.rep('a', 1000000), 'a', string.rep('b', 100))",
        "return _regex(string.rep('a', 1000000), 'a', string.rep('b', 100))",
        "return kt.regex(string.rep('a', 1000000), 'a', string.rep('b', 100))",
    ] {
        let e = eval::<String>(code).unwrap_err();
        assert!(e.contains("the result would pass 64 MiB"), "{e}");
    }
}

#[test]
fn numbers_as_kyoto_cabinet_reads_them() {
    assert_eq!(atoi(b"  -42abc"), -42);
    assert_eq!(atoi(b"x"), 0);
    assert_eq!(atoix(b"1.5k"), 1536);
    assert_eq!(atoix(b"2 m"), 2 << 20);
    assert_eq!(atoix(b"99999999999e"), i64::MAX);
    assert_eq!(atof(b" 1.25e2"), 125.0);
    assert_eq!(atof(b"-inf"), f64::NEG_INFINITY);
    assert!(atof(b"nan").is_nan());
    assert_eq!(number_text(3.0), "3");
    assert_eq!(number_text(0.5), "0.500000");
    assert_eq!(eval::<Option<f64>>("return kt.atoi({})").unwrap(), None);
}

#[test]
fn ucs_and_distance() {
    assert_eq!(utf8_to_ucs2("aé€".as_bytes()), [0x61, 0xe9, 0x20ac]);
    assert_eq!(ucs2_to_utf8(&[0x61, 0xe9, 0x20ac]), "aé€".as_bytes());
    assert_eq!(utf8_to_ucs4("a😀".as_bytes()), [0x61, 0x1f600]);
    assert_eq!(edit_distance(b"kitten", b"sitting"), Some(3));
    assert_eq!(eval::<f64>("return _dist('día', 'dia')").unwrap(), 2.0);
    assert_eq!(
        eval::<f64>("return _dist('día', 'dia', true)").unwrap(),
        1.0
    );
    assert_eq!(
        eval::<f64>("return kt.levdist('día', 'dia', true)").unwrap(),
        1.0
    );
    let big = "x".repeat(20_000);
    let e = eval::<f64>(&format!("return kt.levdist('{big}', '{big}')")).unwrap_err();
    assert!(e.contains("too long"), "{e}");
    assert_eq!(
        eval::<String>("return table.concat(_ucs('aé'), ',')").unwrap(),
        "97,233"
    );
    assert_eq!(eval::<String>("return _ucs({97, 233})").unwrap(), "aé");
}

#[test]
fn sets_follow_tyrants_order() {
    let l = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    assert_eq!(
        isect(&[l(&["a", "b", "c"]), l(&["c", "a", "a", "x"])]),
        l(&["c", "a"])
    );
    assert_eq!(
        isect(&[l(&["a", "b"]), l(&["b"]), l(&["b", "a"])]),
        l(&["b"])
    );
    assert_eq!(isect(&[l(&["a"]), l(&[])]), l(&[]));
    assert_eq!(
        union(&[l(&["b", "a"]), l(&["a", "c"])]),
        l(&["b", "a", "c"])
    );
    // One table of tables, or the tables as arguments; numbers count as their text.
    assert_eq!(
        eval::<String>("return table.concat(_isect({{1, 2, 3}, {'3', 2}}), ',')").unwrap(),
        "3,2"
    );
    assert_eq!(
        eval::<String>("return table.concat(_union({1, 2}, 'skip', {2, 'z'}), ',')").unwrap(),
        "1,2,z"
    );
    assert_eq!(
        eval::<String>("return table.concat(_union({'a', 'b', 'a'}), ',')").unwrap(),
        "a,b"
    );
}

#[test]
fn dumps_of_kyoto_tycoon() {
    assert_eq!(array_dump([&b"ab"[..], b""]), b"\x02ab\x00");
    assert_eq!(array_load(b"\x02ab\x00\x05xy"), [&b"ab"[..], b""]);
    // A size cut short ends the list (Kyoto Tycoon would loop for ever on it).
    assert_eq!(array_load(b"\x01a\x80"), [&b"a"[..]]);
    assert_eq!(map_dump([(&b"k"[..], &b"vv"[..])]), b"\x01\x02kvv");
    assert_eq!(map_load(b"\x01\x02kvv\x01"), [(&b"k"[..], &b"vv"[..])]);
    let s = eval::<String>(
        "local t = kt.mapload(kt.mapdump({a = 1, b = 'x', [3] = 0.5, c = {}}))\n\
         return t.a .. '|' .. t.b .. '|' .. t['3'] .. '|' .. tostring(t.c)",
    )
    .unwrap();
    assert_eq!(s, "1|x|0.500000|nil");
    let s =
        eval::<String>("return table.concat(kt.arrayload(kt.arraydump({1, 'a', true, 2.5})), ',')")
            .unwrap();
    assert_eq!(s, "1,a,2.500000");
}

#[test]
fn sleep_counts_against_the_time_budget() {
    assert!(eval::<bool>("return _sleep(0.01)").unwrap());
    let t = std::time::Instant::now();
    let e = eval::<bool>("return _sleep(30)").unwrap_err();
    assert!(e.contains("--script-timeout"), "{e}");
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    let e = eval::<bool>("kt.sleep(30) return true").unwrap_err();
    assert!(e.contains("--script-timeout"), "{e}");
    // The stop cannot be caught.
    let e = eval::<bool>("pcall(_sleep, 30) return true").unwrap_err();
    assert!(e.contains("--script-timeout"), "{e}");
    assert!(eval::<bool>("return _sleep('x')")
        .unwrap_err()
        .contains("invalid arguments"));
}

#[test]
fn log_writes_to_the_servers_log() {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = lines.clone();
    let mut sh = Shared::new(0, 1 << 20);
    sh.log = crate::context::LogSink::new(move |_, m| keep.lock().unwrap().push(m.to_string()));
    eval_with::<bool>(
        &sh,
        "kt.log('info', 'hello') kt.log('whatever', 'dbg') return true",
    )
    .unwrap();
    assert_eq!(
        *lines.lock().unwrap(),
        ["[SCRIPT] info: hello", "[SCRIPT] debug: dbg"]
    );
}

#[test]
fn file_built_ins_stay_in_the_backup_dir() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"x").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("out")).unwrap();
    let mut sh = Shared::new(0, 1 << 20);
    sh.backup_dir = Some(crate::backup::BackupDir::new(root.path(), None).unwrap());
    let ev = |code: &str| eval_with::<String>(&sh, code);
    assert_eq!(ev("return tostring(_mkdir('d'))").unwrap(), "true");
    assert_eq!(ev("return tostring(_mkdir('d'))").unwrap(), "false");
    assert_eq!(ev("return tostring(_mkdir('d/e'))").unwrap(), "true");
    std::fs::write(root.path().join("d/f.txt"), b"12345").unwrap();
    assert_eq!(
        ev("return table.concat(_glob('d/*'), ',')").unwrap(),
        "d/e,d/f.txt"
    );
    assert_eq!(
        ev("return table.concat(_glob('*/*.txt'), ',')").unwrap(),
        "d/f.txt"
    );
    let abs = format!(
        "{}/d/*.txt",
        sh.backup_dir.as_ref().unwrap().root().display()
    );
    assert_eq!(
        ev(&format!("return table.concat(_glob('{abs}'), ',')")).unwrap(),
        abs.replace('*', "f")
    );
    // A directory reached through a link that leads out is not searched.
    assert_eq!(ev("return table.concat(_glob('out/*'), ',')").unwrap(), "");
    let st = ev("local s = _stat('d/f.txt') return s.size .. tostring(s._regular) .. tostring(s._directory)");
    assert_eq!(st.unwrap(), "5truefalse");
    assert_eq!(
        ev("return tostring(_stat('.')._directory)").unwrap(),
        "true"
    );
    assert_eq!(ev("return tostring(_stat('nothing/here'))").unwrap(), "nil");
    for code in [
        "return _stat('../x')",
        "return _stat('out/secret')",
        "return _remove('out/secret')",
        "return _mkdir('/tmp/kura-script-escape')",
        "return _glob('../*')",
        "return _glob('/etc/*')",
        "return _remove('.')",
    ] {
        let e = ev(code).unwrap_err();
        assert!(e.contains("refused"), "{code}: {e}");
    }
    assert!(outside.path().join("secret").exists());
    assert!(!std::path::Path::new("/tmp/kura-script-escape").exists());
    // The link itself may go; what it points to stays.
    assert_eq!(ev("return tostring(_remove('out'))").unwrap(), "true");
    assert!(outside.path().join("secret").exists());
    assert_eq!(ev("return tostring(_remove('d'))").unwrap(), "true");
    assert!(!root.path().join("d").exists());
    assert_eq!(ev("return tostring(_remove('d'))").unwrap(), "false");
}

#[test]
fn fnmatch_patterns() {
    use super::fs::fnmatch;
    assert!(fnmatch(b"*.txt", b"a.txt"));
    assert!(!fnmatch(b"*.txt", b"a.txt2"));
    assert!(fnmatch(b"a?c", b"abc"));
    assert!(fnmatch(b"[a-c]x", b"bx"));
    assert!(!fnmatch(b"[!a-c]x", b"bx"));
    assert!(fnmatch(b"*a*b*", b"xxaxxbxx"));
    assert!(fnmatch(b"\\*", b"*"));
    assert!(fnmatch(b"[", b"["));
}

// ---------------------------------------------------------------------------------------------
// differential tests against models, random inputs

mod props {
    use super::*;
    use base64::Engine as _;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// One pack directive and values that fit it exactly.
    fn directive() -> impl Strategy<Value = (u8, Vec<f64>)> {
        let n = 0..4usize;
        prop_oneof![
            proptest::collection::vec(any::<i8>().prop_map(f64::from), n.clone())
                .prop_map(|v| (b'c', v)),
            proptest::collection::vec(any::<u8>().prop_map(f64::from), n.clone())
                .prop_map(|v| (b'C', v)),
            proptest::collection::vec(any::<i16>().prop_map(f64::from), n.clone())
                .prop_map(|v| (b's', v)),
            proptest::collection::vec(any::<u16>().prop_map(f64::from), n.clone())
                .prop_map(|v| (b'S', v)),
            proptest::collection::vec(any::<i32>().prop_map(f64::from), n.clone())
                .prop_map(|v| (b'i', v)),
            proptest::collection::vec(any::<u32>().prop_map(f64::from), n.clone())
                .prop_map(|v| (b'I', v)),
            proptest::collection::vec(
                (-(1i64 << 53)..(1i64 << 53)).prop_map(|x| x as f64),
                n.clone()
            )
            .prop_map(|v| (b'l', v)),
            proptest::collection::vec((0u64..(1u64 << 53)).prop_map(|x| x as f64), n.clone())
                .prop_map(|v| (b'L', v)),
            proptest::collection::vec(
                any::<f32>()
                    .prop_filter("nan", |f| !f.is_nan())
                    .prop_map(f64::from),
                n.clone()
            )
            .prop_map(|v| (b'f', v)),
            proptest::collection::vec(any::<f64>().prop_filter("nan", |f| !f.is_nan()), n.clone())
                .prop_map(|v| (b'd', v)),
            proptest::collection::vec(any::<u16>().prop_map(f64::from), n.clone())
                .prop_map(|v| (b'n', v)),
            proptest::collection::vec(any::<u32>().prop_map(f64::from), n.clone())
                .prop_map(|v| (b'N', v)),
            proptest::collection::vec((0u64..(1u64 << 53)).prop_map(|x| x as f64), n.clone())
                .prop_map(|v| (b'M', v)),
            proptest::collection::vec((0u64..(1u64 << 53)).prop_map(|x| x as f64), n)
                .prop_map(|v| (b'w', v)),
        ]
    }

    /// A reference decoding of one packed value, written from Perl's pack documentation: bytes
    /// assembled by shifts, least significant first unless the letter is big-endian.
    fn model_decode(c: u8, data: &mut &[u8]) -> f64 {
        let mut take = |n: usize, big: bool| -> u64 {
            let (head, tail) = data.split_at(n);
            *data = tail;
            let mut v = 0u64;
            for i in 0..n {
                let b = if big { head[i] } else { head[n - 1 - i] };
                v = v << 8 | u64::from(b);
            }
            v
        };
        let sext = |v: u64, bits: u32| ((v << (64 - bits)) as i64 >> (64 - bits)) as f64;
        match c {
            b'c' => sext(take(1, false), 8),
            b'C' => take(1, false) as f64,
            b's' => sext(take(2, false), 16),
            b'S' => take(2, false) as f64,
            b'i' => sext(take(4, false), 32),
            b'I' => take(4, false) as f64,
            b'l' => take(8, false) as i64 as f64,
            b'L' => take(8, false) as f64,
            b'f' => f64::from(f32::from_bits(take(4, false) as u32)),
            b'd' => f64::from_bits(take(8, false)),
            b'n' => take(2, true) as f64,
            b'N' => take(4, true) as f64,
            b'M' => take(8, true) as f64,
            _ => {
                let mut v = 0u64;
                loop {
                    let b = take(1, false);
                    v = v << 7 | (b & 0x7f);
                    if b < 0x80 {
                        break v as f64;
                    }
                }
            }
        }
    }

    fn url_model(data: &[u8]) -> Vec<u8> {
        let mut s = String::new();
        for &b in data {
            if b.is_ascii_alphanumeric() || "_-.!~*'()".contains(b as char) {
                s.push(b as char);
            } else {
                s.push_str(&format!("%{b:02X}"));
            }
        }
        s.into_bytes()
    }

    /// Levenshtein distance by the full (n+1)×(m+1) table.
    fn levenshtein_model(a: &[u8], b: &[u8]) -> usize {
        let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for (i, row) in d.iter_mut().enumerate() {
            row[0] = i;
        }
        for (j, cell) in d[0].iter_mut().enumerate() {
            *cell = j;
        }
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let sub = d[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
                d[i][j] = sub.min(d[i - 1][j] + 1).min(d[i][j - 1] + 1);
            }
        }
        d[a.len()][b.len()]
    }

    fn small_lists() -> impl Strategy<Value = Vec<Vec<Vec<u8>>>> {
        proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(b'a'..b'e', 0..2), 0..8),
            0..5,
        )
    }

    proptest! {
        #[test]
        fn pack_then_unpack_gives_the_values_back(dirs in proptest::collection::vec(directive(), 0..6)) {
            let mut format = Vec::new();
            let mut values = Vec::new();
            for (c, v) in &dirs {
                if v.is_empty() {
                    continue;
                }
                format.push(*c);
                format.extend_from_slice(v.len().to_string().as_bytes());
                values.extend_from_slice(v);
            }
            let packed = pack(&format, &values);
            prop_assert_eq!(unpack(&format, &packed), values.clone());
            // And an independent reading of the bytes agrees.
            let mut rest = &packed[..];
            let mut model = Vec::new();
            for (c, v) in &dirs {
                for _ in v {
                    model.push(model_decode(*c, &mut rest));
                }
            }
            prop_assert!(rest.is_empty());
            prop_assert_eq!(model, values);
        }

        #[test]
        fn decoders_take_any_bytes(format in proptest::collection::vec(any::<u8>(), 0..12), data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = unpack(&format, &data);
            let _ = array_load(&data);
            let _ = map_load(&data);
            for dialect in [Dialect::Tyrant, Dialect::Kyoto] {
                for c in [Codec::Url, Codec::Base64, Codec::Quote, Codec::Hex, Codec::Xml, Codec::Deflate, Codec::RawDeflate, Codec::Gzip, Codec::PackBits] {
                    let _ = codec(dialect, c, true, &data);
                }
                let _ = regex_match(dialect, &data, &format);
                let _ = regex_replace(dialect, &data, &format, b"x");
            }
            let _ = utf8_to_ucs2(&data);
            let _ = utf8_to_ucs4(&data);
        }

        #[test]
        fn codecs_round_trip_and_match_their_models(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let nonul: Vec<u8> = data.iter().copied().filter(|&b| b != 0).collect();
            // Tokyo Cabinet's decoder reads what the base64 crate writes, and skips the bytes
            // outside the alphabet (line breaks, spaces) that a client may put in.
            let std = base64::engine::general_purpose::STANDARD.encode(&data);
            prop_assert_eq!(base64_decode(std.as_bytes()), data.clone());
            let broken: Vec<u8> = std
                .bytes()
                .enumerate()
                .flat_map(|(i, c)| if i % 7 == 6 { vec![b'\n', c] } else { vec![c] })
                .collect();
            prop_assert_eq!(base64_decode(&broken), data.clone());
            prop_assert_eq!(base64_decode(&base64_encode(&data)), data.clone());
            prop_assert_eq!(url_encode(Dialect::Tyrant, &data), url_model(&data));
            for d in [Dialect::Tyrant, Dialect::Kyoto] {
                prop_assert_eq!(url_decode(&url_encode(d, &data)), data.clone());
                for c in [Codec::Deflate, Codec::RawDeflate, Codec::Gzip] {
                    let packed = codec(d, c, false, &data).unwrap();
                    prop_assert_eq!(codec(d, c, true, &packed), Some(data.clone()));
                }
            }
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            prop_assert_eq!(hex_encode(&data), hex.into_bytes());
            prop_assert_eq!(hex_decode(&hex_encode(&data)), data.clone());
            prop_assert_eq!(quote_decode(&quote_encode(&data)), data.clone());
            prop_assert_eq!(xml_unescape(&xml_escape(&nonul)), nonul.clone());
            prop_assert_eq!(packbits_decode(&packbits_encode(&data)), Some(data.clone()));
            // Runs compress: a value of long runs packs to at most 2 bytes per 127.
            let runs: Vec<u8> = data.iter().flat_map(|&b| [b; 300]).collect();
            let packed = packbits_encode(&runs);
            prop_assert!(packed.len() <= data.len() * 6);
            prop_assert_eq!(packbits_decode(&packed), Some(runs));
        }

        #[test]
        fn hashes_match_their_definitions(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            prop_assert_eq!(crc32(&data), crc32_model(&data));
            prop_assert_eq!(hash_murmur(&data), murmur_model(&data));
            prop_assert_eq!(hash_fnv(&data), fnv_model(&data));
        }

        #[test]
        fn edit_distance_matches_the_full_table(a in proptest::collection::vec(b'a'..b'e', 0..12), b in proptest::collection::vec(b'a'..b'e', 0..12)) {
            prop_assert_eq!(edit_distance(&a, &b), Some(levenshtein_model(&a, &b)));
        }

        #[test]
        fn isect_and_union_match_a_set_model(lists in small_lists()) {
            let sets: Vec<BTreeSet<Vec<u8>>> = lists.iter().map(|l| l.iter().cloned().collect()).collect();
            let union_model: BTreeSet<Vec<u8>> = sets.iter().flatten().cloned().collect();
            let u = union(&lists);
            prop_assert_eq!(u.len(), union_model.len());
            prop_assert_eq!(u.into_iter().collect::<BTreeSet<_>>(), union_model);
            let i = isect(&lists);
            let isect_model: BTreeSet<Vec<u8>> = match sets.split_first() {
                Some((first, rest)) => first.iter().filter(|s| rest.iter().all(|r| r.contains(*s))).cloned().collect(),
                None => BTreeSet::new(),
            };
            prop_assert_eq!(i.len(), isect_model.len());
            prop_assert_eq!(i.into_iter().collect::<BTreeSet<_>>(), isect_model);
        }

        #[test]
        fn dumps_round_trip(items in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..6)) {
            let dump = array_dump(items.iter().map(Vec::as_slice));
            prop_assert_eq!(array_load(&dump), items.iter().map(Vec::as_slice).collect::<Vec<_>>());
            let pairs: Vec<(&[u8], &[u8])> = items.chunks(2).filter(|c| c.len() == 2).map(|c| (&c[0][..], &c[1][..])).collect();
            let dump = map_dump(pairs.iter().copied());
            prop_assert_eq!(map_load(&dump), pairs);
        }

        #[test]
        fn strings_match_their_models(s in "[a-c.]{0,20}", pat in "[a-c.]{1,3}", alt in "[x-z]{0,3}") {
            prop_assert_eq!(strstr_replace(s.as_bytes(), pat.as_bytes(), alt.as_bytes()), Some(s.replace(&pat, &alt).into_bytes()));
            prop_assert_eq!(strstr(s.as_bytes(), pat.as_bytes()), s.find(&pat).map_or(0, |p| p + 1));
            let parts: Vec<&[u8]> = s.split(['.']).map(str::as_bytes).collect();
            prop_assert_eq!(split(s.as_bytes(), Some(b".")), parts);
        }

        #[test]
        fn ucs2_round_trips_the_basic_plane(s in "[^\u{0}\u{10000}-\u{10ffff}]{0,20}") {
            let units: Vec<u16> = s.encode_utf16().collect();
            prop_assert_eq!(utf8_to_ucs2(s.as_bytes()), units.clone());
            prop_assert_eq!(ucs2_to_utf8(&units), s.as_bytes().to_vec());
            let chars: Vec<u32> = s.chars().map(u32::from).collect();
            prop_assert_eq!(utf8_to_ucs4(s.as_bytes()), chars);
        }
    }
}

#[test]
fn a_long_pattern_is_searched_in_linear_time() {
    let t = std::time::Instant::now();
    let s = format!("{}b", "a".repeat(2_000_000));
    let pat = format!("{}b", "a".repeat(1_000_000));
    assert_eq!(strstr(s.as_bytes(), pat.as_bytes()), 1_000_001);
    let alt = strstr_replace(s.as_bytes(), pat.as_bytes(), b"x").unwrap();
    assert_eq!(alt.len(), 1_000_001);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
}
