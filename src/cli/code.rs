//! `tsrun code`.
