//! The `tsrun` command line.

fn main() {
    eprintln!("tsrun: not yet implemented");
    std::process::exit(2);
}
