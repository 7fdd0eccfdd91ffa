//! The `tsrun` command line: each subcommand's arguments and logic live in `tsrun::internals::cli`.

use clap::{CommandFactory, Parser, Subcommand};
use tsrun::internals::cli;

#[derive(Parser)]
#[command(
    name = "tsrun",
    version,
    about = "Run, inspect and save TorchScript archives",
    override_usage = "tsrun MODEL                 summary of the archive (class, modules, sizes, methods)\n       \
                      tsrun MODEL -i INPUT...     run forward and print the result (= tsrun run MODEL ...)\n       \
                      tsrun <COMMAND> ...",
    after_help = "Exit codes: 0 success; 1 the model failed (load, compile, run), an input or output \
                  file could not be read or written, or `compare` / `compare-dir` found a mismatch; 2 usage error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Print errors only: no warnings (before or after the subcommand).
    #[arg(short = 'q', long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Say more: load and call timings, the thread count; -vv adds debugging details
    /// (qualified function names in tracebacks).
    #[arg(short = 'v', long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
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
    /// What an archive is: class, top of the module tree, sizes by dtype, methods, extra files.
    Summary(cli::summary::SummaryArgs),
    /// Average snapshots of one architecture (SWA or EMA, as AveragedModel) into an archive.
    Average(cli::average::AverageArgs),
    /// Load a state dict (safetensors, npz, archive) into an archive and save it.
    LoadStateDict(cli::load_state_dict::LoadStateDictArgs),
    /// Run a method and check each leaf of the result against expected arrays (exit 1 if off).
    Compare(cli::compare::CompareArgs),
    /// Check every golden case (a subfolder with model.pt, inputs, expected.npz) of a folder.
    CompareDir(cli::compare_dir::CompareDirArgs),
    /// Export the state dict (parameters and buffers) to a safetensors file or an npz.
    StateDict(cli::state_dict::StateDictArgs),
    /// Parse PyTorch IR text (`str(graph)`): print it back, or run it on inputs.
    ParseGraph(cli::parse_graph::ParseGraphArgs),
    /// Serve archives over the Open Inference Protocol (KServe v2 REST and gRPC).
    #[cfg(feature = "serve")]
    Serve(cli::serve::ServeArgs),
}

/// The subcommand names, from clap's own definition (so a new subcommand needs no list), and
/// `help`.
fn subcommand_names() -> Vec<String> {
    let mut names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    names.push("help".into());
    names
}

/// `tsrun MODEL [--json]` is short for `tsrun summary MODEL`, and `tsrun MODEL ARGS...` for
/// `tsrun run MODEL ARGS...`. A first word that names no file but is close to a subcommand
/// is a typo, reported as one rather than as a missing model. Global flags (`--quiet`, `-v`)
/// may come before the model.
fn with_default_subcommand(
    mut args: Vec<std::ffi::OsString>,
) -> Result<Vec<std::ffi::OsString>, String> {
    let Some(at) = (1..args.len()).find(|&i| !is_global_flag(&args[i])) else {
        return Ok(args);
    };
    let Some(first) = args[at].to_str().map(str::to_string) else {
        return Ok(args);
    };
    let subcommands = subcommand_names();
    if first.starts_with('-') || subcommands.contains(&first) {
        return Ok(args);
    }
    if !std::path::Path::new(&first).exists() {
        if let Some(near) = nearest_subcommand(&first, &subcommands) {
            return Err(format!(
                "`{first}` is neither a file nor a subcommand; did you mean `{near}`?"
            ));
        }
    }
    // only flags the summary has: nothing to run with
    let summary_only = args[at + 1..]
        .iter()
        .all(|a| a == "--json" || is_global_flag(a));
    let implied = if summary_only { "summary" } else { "run" };
    args.insert(at, implied.into());
    Ok(args)
}

/// `--quiet`, `-q`, `--verbose`, `-v`, `-vv`...: the flags every subcommand takes.
fn is_global_flag(arg: &std::ffi::OsStr) -> bool {
    match arg.to_str() {
        Some("--quiet" | "-q" | "--verbose") => true,
        Some(a) => a.len() > 1 && a.starts_with('-') && a[1..].chars().all(|c| c == 'v'),
        None => false,
    }
}

/// The subcommand within two edits of `word`, if any (`inof` -> `info`).
fn nearest_subcommand<'a>(word: &str, subcommands: &'a [String]) -> Option<&'a str> {
    subcommands
        .iter()
        .map(|s| (strsim::damerau_levenshtein(word, s), s.as_str()))
        .filter(|(d, s)| *d <= 2 && *d < s.len())
        .min()
        .map(|(_, s)| s)
}

fn main() {
    let args = match with_default_subcommand(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("tsrun: {msg}");
            std::process::exit(cli::error::EXIT_USAGE);
        }
    };
    let cli = Cli::parse_from(args);
    cli::log::set_verbosity(cli::log::Verbosity::from_flags(cli.quiet, cli.verbose));
    // --quiet silences the runtime's own warnings too (warnings.warn in archive code, ...)
    tsrun::set_warnings_enabled(!cli.quiet);
    // `run` and single-caller `bench` make every call from this thread: make it one of the
    // pool's workers, so parallel kernels start in place rather than by waking the pool.
    let this_thread_calls = match &cli.command {
        Command::Run(a) => Some(a.threads),
        Command::Bench(a) if a.callers <= 1 => Some(a.threads),
        _ => None,
    };
    if let Some(threads) = this_thread_calls {
        if let Err(e) = tsrun::internals::runtime::set_num_threads_for_this_thread(threads) {
            eprintln!("tsrun: {e}");
            std::process::exit(cli::error::EXIT_MODEL);
        }
    }
    let result: cli::error::CliResult = match &cli.command {
        Command::Run(a) => cli::run::run(a),
        Command::Bench(a) => cli::bench::run(a),
        Command::Ops(a) => cli::ops::run(a).map_err(Into::into),
        Command::Info(a) => cli::info::run(a).map_err(Into::into),
        Command::Summary(a) => cli::summary::run(a),
        Command::Convert(a) => cli::convert::run(a).map_err(Into::into),
        Command::Code(a) => cli::code::run_code(a).map_err(Into::into),
        Command::Graph(a) => cli::code::run_graph(a).map_err(Into::into),
        Command::Average(a) => cli::average::run(a).map_err(Into::into),
        Command::LoadStateDict(a) => cli::load_state_dict::run(a).map_err(Into::into),
        Command::Compare(a) => cli::compare::run(a),
        Command::CompareDir(a) => cli::compare_dir::run(a),
        Command::StateDict(a) => cli::state_dict::run(a),
        Command::ParseGraph(a) => cli::parse_graph::run(a),
        #[cfg(feature = "serve")]
        Command::Serve(a) => cli::serve::run(a).map_err(Into::into),
    };
    if let Err(e) = result {
        eprintln!("{}", e.render());
        std::process::exit(e.exit_code());
    }
}
