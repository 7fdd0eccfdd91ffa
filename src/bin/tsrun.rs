//! The `tsrun` command line: each subcommand's arguments and logic live in `tsrun::cli`.

use clap::{Parser, Subcommand};
use tsrun::cli;

#[derive(Parser)]
#[command(
    name = "tsrun",
    version,
    about = "Run, inspect and save TorchScript archives"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Call a method (default: the module itself, with its hooks) and print or save the result.
    Run(cli::run::RunArgs),
    /// Load time and call latency (median and minimum of repeated calls).
    Bench(cli::bench::BenchArgs),
    /// PyTorch's operator overloads and which of them have a tsrun kernel.
    Ops(cli::ops::OpsArgs),
    /// Module tree, parameters and buffers, methods and extra files of an archive.
    Info(cli::info::InfoArgs),
    /// Re-save an archive, optionally casting floating-point parameters and buffers.
    Convert(cli::convert::ConvertArgs),
    /// A method's code, as `m.code` prints it.
    Code(cli::code::CodeArgs),
    /// A method's graph, as `str(m.graph)` prints it.
    Graph(cli::code::GraphArgs),
    /// Average snapshots of one architecture (SWA or EMA, as AveragedModel) into an archive.
    Average(cli::average::AverageArgs),
    /// Load a state dict (safetensors, npz, archive) into an archive and save it.
    LoadStateDict(cli::load_state_dict::LoadStateDictArgs),
    /// Serve archives over the Open Inference Protocol (KServe v2 REST and gRPC).
    #[cfg(feature = "serve")]
    Serve(cli::serve::ServeArgs),
}

/// `tsrun MODEL ...` is short for `tsrun run MODEL ...`: running a model is the main job.
fn with_default_subcommand(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    const SUBCOMMANDS: &[&str] = &[
        "run",
        "bench",
        "ops",
        "info",
        "convert",
        "code",
        "graph",
        "average",
        "load-state-dict",
        "serve",
        "help",
    ];
    if let Some(first) = args.get(1).and_then(|a| a.to_str()) {
        if !first.starts_with('-') && !SUBCOMMANDS.contains(&first) {
            args.insert(1, "run".into());
        }
    }
    args
}

fn main() {
    let cli = Cli::parse_from(with_default_subcommand(std::env::args_os().collect()));
    let result = match &cli.command {
        Command::Run(a) => cli::run::run(a),
        Command::Bench(a) => cli::bench::run(a),
        Command::Ops(a) => cli::ops::run(a),
        Command::Info(a) => cli::info::run(a),
        Command::Convert(a) => cli::convert::run(a),
        Command::Code(a) => cli::code::run_code(a),
        Command::Graph(a) => cli::code::run_graph(a),
        Command::Average(a) => cli::average::run(a),
        Command::LoadStateDict(a) => cli::load_state_dict::run(a),
        #[cfg(feature = "serve")]
        Command::Serve(a) => cli::serve::run(a),
    };
    if let Err(e) = result {
        eprintln!("tsrun: {e}");
        std::process::exit(1);
    }
}
