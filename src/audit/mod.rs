//! The pure audit core. (being written)
