//! `tsrun info`.
