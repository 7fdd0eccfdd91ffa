//! The `tsrun` command line: each subcommand's arguments and logic live in `tsrun::cli`.

use clap::{Parser, Subcommand};
use tsrun::cli;

#[derive(Parser)]
#[command(
    name = "tsrun",
    version,
    about = "Load, inspect and save TorchScript archives"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Module tree, parameters and buffers, methods and extra files of an archive.
    Info(cli::info::InfoArgs),
    /// Re-save an archive, optionally casting floating-point parameters and buffers.
    Convert(cli::convert::ConvertArgs),
    /// A method's code, as `m.code` prints it.
    Code(cli::code::CodeArgs),
    /// A method's graph, as `str(m.graph)` prints it.
    Graph(cli::code::GraphArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Info(a) => cli::info::run(a),
        Command::Convert(a) => cli::convert::run(a),
        Command::Code(a) => cli::code::run_code(a),
        Command::Graph(a) => cli::code::run_graph(a),
    };
    if let Err(e) = result {
        eprintln!("tsrun: {e}");
        std::process::exit(1);
    }
}
