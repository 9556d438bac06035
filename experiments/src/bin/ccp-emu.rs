//! `ccp-emu`: run a command behind an emulated bottleneck (see `ccp_experiments::emu`).

use ccp_experiments::emu::cli::EmuConfig;
use ccp_experiments::emu::run::run;

const USAGE: &str = "usage: ccp-emu [--name N] [--server CMD]... [--wait-port P]... [--stats FILE]
               [--flow-log FILE]
               [--default-cc CC] [--tcp-mem BYTES] [--no-realtime] [--no-gso] [--loss-seed N]
               [delay MS] [loss uplink|downlink RATE]...
               [link UP.trace DOWN.trace [--uplink-queue=T] [--uplink-queue-args=A]
               [--downlink-queue=T] [--downlink-queue-args=A] [--uplink-log=F]
               [--downlink-log=F] [--timing=whole-ms|serial]] [-- CMD ARGS...]
Mahimahi-compatible: mm-delay/mm-link/mm-loss are accepted as stage names. Needs root.
Beyond Mahimahi: --timing=serial spreads each millisecond's delivery opportunities over it
(a link that serializes packets at its rate; Mahimahi serves them all at the millisecond),
--no-gso makes TCP in both namespaces send one packet per buffer (no bursts of segments).";

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
