//! One module per subcommand.

pub mod cat;
pub mod export;
pub mod info;
pub mod ls;
pub mod mkfs;
pub mod stat;
mod util;
