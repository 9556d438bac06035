//! `ccp-emu`: run a command behind an emulated bottleneck (see `ccp_experiments::emu`).

use ccp_experiments::emu::cli::EmuConfig;
use ccp_experiments::emu::run::run;

const USAGE: &str = "usage: ccp-emu [--name N] [--server CMD]... [--wait-port P]... [--stats FILE]
               [--flow-log FILE]
               [--default-cc CC] [--tcp-mem BYTES] [--no-realtime]
               [delay MS] [link UP.trace DOWN.trace [--uplink-queue=T] [--uplink-queue-args=A]
               [--downlink-queue=T] [--downlink-queue-args=A] [--uplink-log=F]
               [--downlink-log=F]] [-- CMD ARGS...]
Mahimahi-compatible: mm-delay/mm-link are accepted as stage names. Needs root.";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return;
    }
    let cfg = match EmuConfig::parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ccp-emu: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    match run(&cfg) {
        // Like Mahimahi: a failing command makes the shell exit 1.
        Ok(stats) => std::process::exit(if stats.command_exit_code == Some(0) {
            0
        } else {
            1
        }),
        Err(e) => {
            eprintln!("ccp-emu: {e}");
            std::process::exit(1);
        }
    }
}
