//! `tsrun convert`.
