//! Checksum primitives shared by every structure: the kernel's raw crc32c
//! (`ext4_chksum`, no final inversion) used by `metadata_csum`, and the crc16
//! (`crc16` in `lib/ext2fs/crc16.c`, poly 0x8005 reflected, no final xor) used by
//! `gdt_csum`/`uninit_bg`. Each structure's module computes its own checksum
//! from these and its own coverage rules.
//!
//! See `Documentation/filesystems/ext4/checksums.rst`.

/// The kernel's `crc32c(seed, data)`: Castagnoli CRC with the given running
/// state and no final inversion, as `ext4_chksum` computes it.
pub fn crc32c_raw(seed: u32, data: &[u8]) -> u32 {
    !crc32c::crc32c_append(!seed, data)
}

/// The per-filesystem checksum seed: `crc32c(~0, s_uuid)`, unless the
/// `metadata_csum_seed` feature stores it in `s_checksum_seed`.
pub fn fs_csum_seed(uuid: &[u8; 16]) -> u32 {
    crc32c_raw(!0, uuid)
}

const CRC16_TABLE: [u16; 256] = crc16_table();

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u16;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xA001 } else { crc >> 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// crc16 (ANSI, reflected 0x8005) continuing from `crc`, as e2fsprogs'
/// `ext2fs_crc16` and the kernel's `crc16` compute it.
pub fn crc16(mut crc: u16, data: &[u8]) -> u16 {
    for &byte in data {
        let idx = usize::from((crc ^ u16::from(byte)) & 0xff);
        crc = (crc >> 8) ^ CRC16_TABLE[idx];
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_castagnoli_check_value() {
        // The standard check value of CRC-32C over "123456789" is 0xE3069283,
        // which is the inverted raw state when the seed is ~0.
        assert_eq!(!crc32c_raw(!0, b"123456789"), 0xE306_9283);
    }

    #[test]
    fn crc16_matches_modbus_check_value() {
        // CRC-16/MODBUS (init 0xFFFF) check value over "123456789" is 0x4B37.
        assert_eq!(crc16(0xFFFF, b"123456789"), 0x4B37);
    }
}
