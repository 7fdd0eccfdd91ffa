fn main() {
    // The TorchScript grammar lives in grammar/; lalrpop generates the parser into OUT_DIR.
    lalrpop::Configuration::new()
        .set_in_dir("grammar")
        .process()
        .expect("lalrpop grammar generation failed");
    println!("cargo:rerun-if-changed=grammar");
}
