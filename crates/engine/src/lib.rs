//! engine placeholder
