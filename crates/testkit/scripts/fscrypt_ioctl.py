#!/usr/bin/env python3
"""Drives the kernel's fscrypt ioctls for the encryption tests (root only).

  add-key MOUNTPOINT KEYFILE [DESCRIPTOR_HEX]
      FS_IOC_ADD_ENCRYPTION_KEY: with a descriptor, as a v1 key under it;
      without, as a v2 key. Prints the v2 identifier (hex) or the descriptor.
  set-policy DIR KEYHEX [FLAGS] [CONTENTS_MODE NAMES_MODE]
      FS_IOC_SET_ENCRYPTION_POLICY on an empty directory: a 16-hex-digit
      KEYHEX is a v1 descriptor, a 32-digit one a v2 identifier.
  get-policy PATH
      FS_IOC_GET_ENCRYPTION_POLICY_EX: prints version, modes, flags, key.

Struct layouts from include/uapi/linux/fscrypt.h.
"""
import fcntl
import os
import struct
import sys


def ioc(direction, nr, size):
    return (direction << 30) | (size << 16) | (ord("f") << 8) | nr


IOC_WRITE, IOC_READ = 1, 2
# struct fscrypt_add_key_arg: key_spec (type, reserved, 32-byte union),
# raw_size, key_id, 8 reserved words, then the raw key.
ADD_KEY_HDR = struct.Struct("<II32sII32s")
FS_IOC_ADD_ENCRYPTION_KEY = ioc(IOC_READ | IOC_WRITE, 23, ADD_KEY_HDR.size)
FS_IOC_SET_ENCRYPTION_POLICY = ioc(IOC_READ, 19, 12)
FS_IOC_GET_ENCRYPTION_POLICY_EX = ioc(IOC_READ | IOC_WRITE, 22, 9)
KEY_SPEC_DESCRIPTOR, KEY_SPEC_IDENTIFIER = 1, 2


def add_key(mnt, keyfile, desc_hex=None):
    raw = open(keyfile, "rb").read()
    if desc_hex:
        spec_type, spec = KEY_SPEC_DESCRIPTOR, bytes.fromhex(desc_hex)
    else:
        spec_type, spec = KEY_SPEC_IDENTIFIER, b""
    arg = bytearray(ADD_KEY_HDR.pack(spec_type, 0, spec.ljust(32, b"\0"), len(raw), 0, b"\0" * 32) + raw)
    fd = os.open(mnt, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_ADD_ENCRYPTION_KEY, arg)
    finally:
        os.close(fd)
    out = bytes(arg[8:40])
    print((out[:8] if desc_hex else out[:16]).hex())


def set_policy(path, key_hex, flags=2, contents=1, names=4):
    key = bytes.fromhex(key_hex)
    if len(key) == 8:
        arg = struct.pack("<BBBB8s", 0, contents, names, flags, key)
    else:
        arg = struct.pack("<BBBBB3s16s", 2, contents, names, flags, 0, b"\0" * 3, key)
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_SET_ENCRYPTION_POLICY, bytearray(arg))
    finally:
        os.close(fd)


def get_policy(path):
    arg = bytearray(struct.pack("<Q", 24) + b"\0" * 24)
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_GET_ENCRYPTION_POLICY_EX, arg)
    finally:
        os.close(fd)
    p = bytes(arg[8:])
    key = p[4:12] if p[0] == 0 else p[8:24]
    print(p[0], p[1], p[2], p[3], key.hex())


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "add-key":
        add_key(*args)
    elif cmd == "set-policy":
        key, rest = args[1], [int(a, 0) for a in args[2:]]
        set_policy(args[0], key, *rest)
    elif cmd == "get-policy":
        get_policy(args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
