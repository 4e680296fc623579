//! `stat --json` (docs/json.md): the fields the text form prints, as one
//! object; also the pieces `ls --json` shares (file type names, byte
//! strings that may not be UTF-8).

use anyhow::Result;
use ext4kit_engine::{Filesystem, Inode, Metadata};
use ext4kit_format::extent::NodeEntries;
use ext4kit_format::inode::{FileType, Timestamp};
use serde_json::{Map, Value, json};

/// The stable name of a file type (`i_mode`'s type bits).
pub fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::Regular => "regular",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::CharDevice => "char_device",
        FileType::BlockDevice => "block_device",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
    }
}

/// Sets `key` to `bytes` as a string, lossy when they are not UTF-8 (names
/// and values on disk are bytes); then `<key>_bytes` also holds them
/// exactly, as an array of numbers.
pub fn put_bytes(obj: &mut Map<String, Value>, key: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => {
            obj.insert(key.into(), json!(s));
        }
        Err(_) => {
            obj.insert(key.into(), json!(String::from_utf8_lossy(bytes)));
            obj.insert(format!("{key}_bytes"), json!(bytes));
        }
    }
}

/// Sets `<key>` (seconds since 1970) and `<key>_nsec`.
pub fn put_time(obj: &mut Map<String, Value>, key: &str, t: Timestamp) {
    obj.insert(key.into(), json!(t.secs));
    obj.insert(format!("{key}_nsec"), json!(t.nsecs));
}

/// `[major, minor]` for device nodes, else `None`.
pub fn rdev(m: &Metadata) -> Option<Value> {
    matches!(m.file_type, FileType::CharDevice | FileType::BlockDevice).then(|| json!([m.rdev.0, m.rdev.1]))
}

/// The whole `stat --json` object.
pub fn object(fs: &Filesystem, inode: &Inode, m: &Metadata, names: &[&str]) -> Result<Value> {
    let mut o = Map::new();
    let fields = json!({
        "inode": m.ino,
        "type": type_name(m.file_type),
        "mode": inode.raw.i_mode.get(),
        "flags": m.flags,
        "flag_names": names,
        "generation": m.generation,
        "uid": m.uid,
        "gid": m.gid,
        "size": m.size,
        "links": m.nlink,
        "blocks": m.blocks,
        "file_acl": inode.raw.file_acl(),
        "extra_isize": inode.raw.i_extra_isize.get(),
    });
    if let Value::Object(f) = fields {
        o.extend(f);
    }
    put_time(&mut o, "ctime", m.ctime);
    put_time(&mut o, "atime", m.atime);
    put_time(&mut o, "mtime", m.mtime);
    if let Some(c) = m.crtime {
        put_time(&mut o, "crtime", c);
    }
    if let Some(d) = rdev(m) {
        o.insert("rdev".into(), d);
    }
    if m.file_type == FileType::Symlink {
        put_bytes(&mut o, "target", &fs.read_link(inode)?);
    }
    o.insert("storage".into(), json!(storage(fs, inode)?));
    o.insert("mapping".into(), json!(mapping(fs, inode)?));
    o.insert("xattrs".into(), json!(xattrs(fs, inode)?));
    Ok(Value::Object(o))
}

/// Where the data lives: `fast_symlink`, `inline`, `extents` or `block_map`.
fn storage(fs: &Filesystem, inode: &Inode) -> Result<&'static str> {
    Ok(if fs.is_fast_symlink(inode) {
        "fast_symlink"
    } else if inode.has_inline_data() {
        "inline"
    } else if inode.uses_extents() {
        "extents"
    } else {
        "block_map"
    })
}

/// Every extent (leaf order) or block-map run, in full.
fn mapping(fs: &Filesystem, inode: &Inode) -> Result<Vec<Value>> {
    if fs.is_fast_symlink(inode) || inode.has_inline_data() {
        return Ok(Vec::new());
    }
    let run = |logical: u64, physical: u64, length: u64, unwritten: bool| json!({"logical": logical, "physical": physical, "length": length, "unwritten": unwritten});
    if !inode.uses_extents() {
        let runs = fs.all_runs(inode)?;
        return Ok(runs
            .iter()
            .map(|r| run(r.logical, r.physical, r.len, r.unwritten))
            .collect());
    }
    let mut out = Vec::new();
    for (_, node) in fs.extent_tree(inode)? {
        if let NodeEntries::Leaf(v) = &node.entries {
            out.extend(
                v.iter()
                    .map(|e| run(e.logical.into(), e.physical, e.len.into(), e.unwritten)),
            );
        }
    }
    Ok(out)
}

fn xattrs(fs: &Filesystem, inode: &Inode) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for x in fs.xattrs(inode)? {
        let mut o = Map::new();
        put_bytes(&mut o, "name", &x.name);
        put_bytes(&mut o, "value", &x.value);
        out.push(Value::Object(o));
    }
    Ok(out)
}
