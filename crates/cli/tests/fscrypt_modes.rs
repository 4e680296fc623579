//! The fscrypt modes besides AES-256-XTS/AES-256-CTS-CBC on the command
//! line (`key set-policy --contents --filenames --flags`): each pair and
//! key flag the kernel accepts is set, written and read back with the key,
//! lists no-key names without it, and leaves an image `e2fsck -fn` finds
//! clean; the combinations the kernel refuses are refused by name. This
//! kernel has none of these modes (no ESSIV, Adiantum, HCTR2 or SM4 in
//! its crypto configuration), so the ciphers themselves are checked
//! against published vectors in the engine's `crypt::modes` tests.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use ext4kit_testkit::tools::{assert_fsck_clean, require_tools};

const DESC: &str = "0123456789abcdef";
const NAME: &str = "/a name longer than one cipher block";

fn ext4kit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit")).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> Vec<u8> {
    let out = ext4kit(args);
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn write(img: &str, path: &str, keys: &[&str], offset: Option<&str>, data: &[u8]) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ext4kit"));
    cmd.args(["write", img, path]);
    for k in keys {
        cmd.args(["--key", k]);
    }
    if let Some(o) = offset {
        cmd.args(["--offset", o]);
    }
    let mut w = cmd.stdin(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut w.stdin.take().unwrap(), data).unwrap();
    assert!(w.wait().unwrap().success(), "write {path}");
}

/// A 4 KiB-block `encrypt,stable_inodes` image made by mke2fs, and a
/// 64-byte key file.
fn image(dir: &Path) -> Option<(String, String)> {
    if let Err(why) = require_tools(&["mkfs.ext4", "e2fsck"]) {
        ext4kit_testkit::skipped!("{why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
        return None;
    }
    let img = dir.join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-O", "encrypt,stable_inodes"])
        .arg(&img)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key = dir.join("key");
    std::fs::write(&key, (0..64u8).map(|i| i.wrapping_mul(13) ^ 0x3c).collect::<Vec<_>>()).unwrap();
    Some((img.to_str()?.to_string(), key.to_str()?.to_string()))
}

#[test]
fn every_mode_pair_and_key_flag_round_trips_through_an_image() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((img, k)) = image(tmp.path()) else {
        return;
    };
    let v1 = format!("{DESC}={k}");
    // (directory, v1?, set-policy options)
    let cases: &[(&str, bool, &[&str])] = &[
        ("/essiv1", true, &["--contents", "AES-128-CBC-ESSIV"]),
        ("/essiv2", false, &["--contents", "aes-128-cbc", "--padding", "4"]),
        ("/adiantum1", true, &["--contents", "Adiantum", "--flags", "direct_key"]),
        (
            "/adiantum2",
            false,
            &["--contents", "Adiantum", "--flags", "direct_key"],
        ),
        ("/adiantum", false, &["--contents", "Adiantum", "--padding", "16"]),
        (
            "/hctr2",
            false,
            &["--filenames", "AES-256-HCTR2", "--flags", "iv_ino_lblk_32"],
        ),
        (
            "/hctr2_64",
            false,
            &["--filenames", "AES-256-HCTR2", "--flags", "iv_ino_lblk_64"],
        ),
        ("/sm4", false, &["--contents", "SM4-XTS", "--padding", "8"]),
    ];
    let body: Vec<u8> = (0..10_000u32).map(|n| (n * 37 % 253) as u8).collect();
    let mut patched = body.clone();
    patched[4090..4110].copy_from_slice(b"straddles two blocks");
    for (dir, is_v1, opts) in cases {
        ok(&["mkdir", &img, dir]);
        let key = if *is_v1 { v1.as_str() } else { k.as_str() };
        let mut args = vec!["key", "set-policy", &img, dir, "--key", key];
        args.extend_from_slice(opts);
        ok(&args);
        let file = format!("{dir}{NAME}");
        write(&img, &file, &[key], None, &body);
        write(&img, &file, &[key], Some("4090"), b"straddles two blocks");
        let read = ok(&["cat", &img, &file, "--key", key]);
        assert!(read == patched, "{dir} {opts:?}: contents read back differ");
        let listed = String::from_utf8(ok(&["ls", &img, dir, "--key", key])).unwrap();
        assert!(listed.contains(&NAME[1..]), "{dir}: {listed}");
        let nokey = String::from_utf8(ok(&["ls", &img, dir])).unwrap();
        assert!(!nokey.contains(&NAME[1..]), "{dir} lists the plaintext without its key");
        assert!(
            !ext4kit(&["cat", &img, &file]).status.success(),
            "{dir}: cat without its key"
        );
    }
    assert_fsck_clean(Path::new(&img)).expect("e2fsck -fn clean");
}

#[test]
fn combinations_the_kernel_refuses_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let Some((img, k)) = image(tmp.path()) else {
        return;
    };
    ok(&["mkdir", &img, "/d"]);
    let v1 = format!("{DESC}={k}");
    let refusals: &[(&str, &[&str], &[&str])] = &[
        (&v1, &["--filenames", "AES-256-HCTR2"], &["AES-256-HCTR2", "v1"]),
        (&k, &["--flags", "direct_key"], &["DIRECT_KEY", "AES-256-XTS"]),
        (
            &k,
            &["--contents", "Adiantum", "--flags", "iv_ino_lblk_64"],
            &["IV_INO_LBLK_64", "Adiantum"],
        ),
        (
            &k,
            &["--contents", "SM4-XTS", "--filenames", "AES-256-CTS"],
            &["SM4-XTS", "AES-256-CTS-CBC"],
        ),
        (&k, &["--flags", "direct_key,iv_ino_lblk_32"], &["exclude"]),
        (&v1, &["--flags", "iv_ino_lblk_32"], &["v1"]),
        (&k, &["--contents", "AES-512-XTS"], &["unknown fscrypt contents mode"]),
        (&k, &["--contents", "AES-256-HCTR2"], &["not a contents mode"]),
    ];
    for (key, opts, words) in refusals {
        let mut args = vec!["key", "set-policy", &img, "/d", "--key", key];
        args.extend_from_slice(opts);
        let out = ext4kit(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{opts:?} was taken");
        for w in *words {
            assert!(err.contains(w), "{opts:?}: {err:?} lacks {w:?}");
        }
    }
    // Nothing was changed by the refusals: the directory takes a policy.
    ok(&["key", "set-policy", &img, "/d", "--key", &k, "--contents", "Adiantum"]);
    assert_fsck_clean(Path::new(&img)).expect("e2fsck -fn clean");
}
