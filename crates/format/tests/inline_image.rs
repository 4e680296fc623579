//! Inline data against an image written by `mkfs.ext4 -O inline_data -d`.

mod e2tools;

use e2tools::{extra_isize, have_tools, mkfs, raw_inode};
use ext4kit_format::inline::{InlineDir, content, system_data};
use ext4kit_format::xattr::{ibody_region, parse_ibody};

/// `i_block`, `system.data` value and `i_size` of `path`.
fn inline_parts(img: &std::path::Path, path: &str) -> (Vec<u8>, Vec<u8>, u64) {
    let inode = raw_inode(img, path);
    let flags = u32::from_le_bytes(inode[32..36].try_into().unwrap());
    assert_ne!(flags & 0x1000_0000, 0, "{path} lacks EXT4_INLINE_DATA_FL");
    let region = ibody_region(&inode, extra_isize(&inode)).unwrap();
    let entries = parse_ibody(region).unwrap();
    let data = system_data(&entries).expect("system.data").to_vec();
    let lo = u32::from_le_bytes(inode[4..8].try_into().unwrap());
    let hi = u32::from_le_bytes(inode[108..112].try_into().unwrap());
    let size = (u64::from(hi) << 32) | u64::from(lo);
    (inode[40..100].to_vec(), data, size)
}

#[test]
fn mke2fs_inline_file_and_dir() {
    let test = "mke2fs_inline_file_and_dir";
    if !have_tools(test, &["mkfs.ext4", "debugfs"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("dir")).unwrap();
    let tiny = b"tiny file".to_vec();
    let small: Vec<u8> = (0..100u8).collect(); // spills past i_block
    std::fs::write(src.join("tiny"), &tiny).unwrap();
    std::fs::write(src.join("small"), &small).unwrap();
    for name in ["one", "two", "three"] {
        std::fs::write(src.join("dir").join(name), name).unwrap();
    }
    let img = tmp.path().join("img");
    let src_arg = src.to_str().unwrap();
    mkfs(
        &img,
        &["-b", "4096", "-I", "256", "-O", "inline_data", "-d", src_arg],
        "16M",
    );

    for (path, want) in [("/tiny", &tiny), ("/small", &small)] {
        let (i_block, data, size) = inline_parts(&img, path);
        assert_eq!(&content(&i_block, &data, size).unwrap(), want, "{path}");
    }
    let (i_block, data, _) = inline_parts(&img, "/dir");
    let dir = InlineDir::parse(&i_block, &data).unwrap();
    assert_eq!(dir.parent, 2);
    let mut names: Vec<String> = dir
        .entries()
        .map(|e| String::from_utf8(e.unwrap().name.to_vec()).unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["one", "three", "two"]);
}
