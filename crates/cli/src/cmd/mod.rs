//! One module per subcommand.

pub mod bench;
pub mod cat;
pub mod completions;
pub mod dates;
pub mod debug;
pub mod defrag;
pub mod edit;
pub mod export;
pub mod frag;
pub mod fsck;
pub mod import;
pub mod info;
pub mod layout;
pub mod ls;
pub mod man;
pub mod mkfs;
pub mod mount;
pub mod precheck;
pub mod quota;
pub mod resize;
pub mod stat;
pub mod sync;
pub mod tune;
pub mod undo;
mod util;
