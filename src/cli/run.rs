//! `tsrun run`.
