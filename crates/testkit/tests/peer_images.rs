//! The e2fsprogs peer images decompress into the cache and look like images.

use std::io::Read;

use ext4kit_testkit::peer::{e2fsprogs_images_in, peer_data_dir};

#[test]
fn peer_images_decompress() {
    let Some(dir) = peer_data_dir() else {
        ext4kit_testkit::skipped!("no e2fsprogs peer data (set EXT4KIT_PEER_DATA)");
        return;
    };
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ext4kit-peer");
    let images = e2fsprogs_images_in(&cache);
    let compressed = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("image.gz").is_file())
        .count();
    eprintln!(
        "peer: {} images from {} ({} gzip sources)",
        images.len(),
        dir.display(),
        compressed
    );
    assert!(images.len() >= compressed, "some image.gz were not decompressed");
    let mut with_magic = 0;
    for img in &images {
        assert!(img.path.starts_with(&cache));
        assert!(!img.test.is_empty());
        let len = std::fs::metadata(&img.path).unwrap().len();
        assert!(
            len > 0 && len <= ext4kit_testkit::peer::MAX_IMAGE_BYTES,
            "{}: {len}",
            img.test
        );
        // The ext2 superblock magic 0xEF53 at byte 1024 + 56, in most images.
        let mut head = vec![0u8; 2048];
        let mut f = std::fs::File::open(&img.path).unwrap();
        let n = f.read(&mut head).unwrap();
        if n >= 1082 && head[1080..1082] == [0x53, 0xef] {
            with_magic += 1;
        }
    }
    assert!(
        with_magic * 2 > images.len(),
        "only {with_magic} of {} images have an ext2 magic",
        images.len()
    );
    // A second call reuses the cache and finds the same list.
    assert_eq!(e2fsprogs_images_in(&cache), images);
}
