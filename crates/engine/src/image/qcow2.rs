//! A QCOW2 image back to a sparse raw one (`e2image -r IMAGE.qcow2 OUT`):
//! each cluster the L1 and L2 tables map is copied to its virtual offset.
//! Every offset is checked against the input's length before it is read,
//! so a damaged or hostile file cannot make this read or allocate beyond
//! what the file holds.

use std::fs::File;
use std::os::unix::fs::FileExt;

use ext4kit_format::qcow2::{self, HEADER_SIZE, Header, QCOW_OFLAG_COMPRESSED};

use crate::error::{Error, Result};

/// True when `file` starts with a QCOW2 header's magic.
pub fn is_qcow2(file: &File) -> bool {
    let mut magic = [0u8; 4];
    file.read_exact_at(&mut magic, 0).is_ok() && u32::from_be_bytes(magic) == qcow2::QCOW_MAGIC
}

fn bad(what: String) -> Error {
    Error::InvalidArgument(format!("damaged QCOW2 image: {what}"))
}

/// Copies the QCOW2 image `input` into the empty file `out` as a raw image
/// of the header's size; returns the clusters copied.
///
/// # Errors
/// A header e2image would refuse, compressed clusters, table or data
/// offsets outside the file, I/O errors.
pub fn qcow2_to_raw(input: &File, out: &File) -> Result<u64> {
    let io = |offset: u64| move |source| Error::Io { offset, source };
    let len = input.metadata().map_err(io(0))?.len();
    let mut hb = [0u8; HEADER_SIZE];
    input.read_exact_at(&mut hb, 0).map_err(io(0))?;
    let h = Header::parse(&hb).map_err(|e| bad(e.to_string()))?;
    let cs = h.cluster_size();
    let l1_bytes = u64::from(h.l1_size) * 8;
    if h.l1_table_offset.saturating_add(l1_bytes) > len {
        return Err(bad(format!(
            "L1 table at {} runs past the end of the file",
            h.l1_table_offset
        )));
    }
    let mut l1 = vec![0u8; l1_bytes as usize];
    input
        .read_exact_at(&mut l1, h.l1_table_offset)
        .map_err(io(h.l1_table_offset))?;
    let (mut l2, mut data) = (vec![0u8; cs as usize], vec![0u8; cs as usize]);
    let mut copied = 0;
    for i in 0..u64::from(h.l1_size) {
        let at = qcow2::entry_offset(qcow2::table_entry(&l1, i));
        if at == 0 {
            continue;
        }
        if at.saturating_add(cs) > len {
            return Err(bad(format!("L1 entry {i} points past the end of the file")));
        }
        input.read_exact_at(&mut l2, at).map_err(io(at))?;
        for j in 0..h.l2_entries() {
            let e = qcow2::table_entry(&l2, j);
            if e & QCOW_OFLAG_COMPRESSED != 0 {
                return Err(Error::Unsupported("compressed QCOW2 clusters".into()));
            }
            let src = qcow2::entry_offset(e);
            if src == 0 {
                continue;
            }
            let dst = (i * h.l2_entries() + j) * cs;
            if src.saturating_add(cs) > len || dst.saturating_add(cs) > h.size {
                return Err(bad(format!(
                    "L2 entry {j} of table {i} points outside the file or the disk"
                )));
            }
            input.read_exact_at(&mut data, src).map_err(io(src))?;
            out.write_all_at(&data, dst).map_err(io(dst))?;
            copied += 1;
        }
    }
    out.set_len(h.size).map_err(io(h.size))?;
    Ok(copied)
}
