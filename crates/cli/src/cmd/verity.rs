//! `ext4kit verity enable|digest IMAGE PATH`: fs-verity on a file of an
//! image, as `fsverity enable` and `fsverity digest` do on a mounted one
//! (the tree block size is the file system block size).

use anyhow::{Context, Result, bail};
use ext4kit_engine::verity::VerityOptions;
use ext4kit_format::verity::HashAlgorithm;

use crate::ImageArgs;
use crate::open::{open_ro, open_rw};

/// Arguments of `verity`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Build the Merkle tree of a file and make it read-only and verified.
    Enable(EnableArgs),
    /// Print a verity file's digest as `fsverity digest` does
    /// (`sha256:HEX PATH`); fails for a file without fs-verity.
    Digest(PathArgs),
}

#[derive(clap::Args)]
struct PathArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// The file in the image.
    path: String,
}

#[derive(clap::Args)]
struct EnableArgs {
    #[command(flatten)]
    file: PathArgs,
    /// Salt hashed before every block, in hex (up to 32 bytes).
    #[arg(long)]
    salt: Option<String>,
    /// The hash: sha256 (default) or sha512 (`fsverity enable --hash-alg`).
    #[arg(long, default_value = "sha256", value_parser = ["sha256", "sha512"])]
    hash_alg: String,
}

fn hex(s: &str) -> Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("--salt {s:?}: not an even number of hex digits");
    }
    Ok((0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
        .collect())
}

/// Runs the subcommand.
pub fn run(a: Args) -> Result<()> {
    match a.what {
        What::Enable(e) => enable(e),
        What::Digest(d) => digest(d),
    }
}

fn enable(a: EnableArgs) -> Result<()> {
    let salt = a.salt.as_deref().map(hex).transpose()?.unwrap_or_default();
    let fs = open_rw(&a.file.image)?;
    let path = &a.file.path;
    let inode = fs.resolve_opts(path.as_bytes(), true).with_context(|| path.clone())?;
    let opts = VerityOptions {
        salt,
        hash: if a.hash_alg == "sha512" {
            HashAlgorithm::Sha512
        } else {
            HashAlgorithm::Sha256
        },
    };
    fs.enable_verity(inode.ino, &opts).with_context(|| path.clone())?;
    fs.unmount()?;
    Ok(())
}

fn digest(a: PathArgs) -> Result<()> {
    let fs = open_ro(&a.image)?;
    let inode = fs
        .resolve_opts(a.path.as_bytes(), true)
        .with_context(|| a.path.clone())?;
    let Ok((alg, d)) = fs.verity_digest(inode.ino) else {
        bail!("{}: not a verity file (or its descriptor is corrupt)", a.path);
    };
    let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
    println!("{}:{hex} {}", alg.name(), a.path);
    Ok(())
}
