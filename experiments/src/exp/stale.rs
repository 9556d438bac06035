//! Leftovers of runs killed without a chance to clean up (SIGKILL, a lost session): the
//! emulator's namespaces (`emuh-r<pid>-snd`, `emuh-r<pid>-rcv`, Mahimahi's `emuh-mm<pid>`) and
//! the sockets of a run's agent and datapath (`ccp-exp-<pid>`, `ccp-exp-dp-<pid>-<shard>` in
//! the socket directory). Each is named after the pid of the shell that made it, which lives
//! as long as the run, so a name whose shell is gone is a leftover. `ccp-exp run` removes them
//! before its first run; a name whose pid is in use again is kept.

use std::path::Path;
use std::process::Command;

use ccp_rundir::SOCKET_DIR;

/// Where the namespaces `ip netns add` makes are mounted.
const NETNS_DIR: &str = "/run/netns";

/// The pid of the shell that made a namespace called `name`, if the name is one of ours.
fn netns_owner(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix("emuh-mm") {
        return rest.parse().ok();
    }
    let rest = name.strip_prefix("emuh-r")?;
    let pid = rest
        .strip_suffix("-snd")
        .or_else(|| rest.strip_suffix("-rcv"))?;
    pid.parse().ok()
}

/// The pid of the shell that started the agent or datapath whose socket is called `name`.
fn socket_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("ccp-exp-")?;
    match rest.strip_prefix("dp-") {
        Some(dp) => dp.split_once('-')?.0.parse().ok(),
        None => rest.parse().ok(),
    }
}

/// The names among `names` that `owner` says are ours and whose owner is not alive.
fn stale<'a>(
    names: impl IntoIterator<Item = &'a str>,
    owner: fn(&str) -> Option<u32>,
    alive: &impl Fn(u32) -> bool,
) -> Vec<&'a str> {
    names
        .into_iter()
        .filter(|n| owner(n).is_some_and(|pid| !alive(pid)))
        .collect()
}

fn entries(dir: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the leftovers of killed runs; returns what it removed, and what it could not
/// with the reason.
pub fn remove() -> (Vec<String>, Vec<String>) {
    let alive = |pid: u32| Path::new("/proc").join(pid.to_string()).exists();
    let (mut removed, mut failed) = (Vec::new(), Vec::new());
    let namespaces = entries(NETNS_DIR);
    for ns in stale(namespaces.iter().map(String::as_str), netns_owner, &alive) {
        match Command::new("ip").args(["netns", "del", ns]).output() {
            Ok(o) if o.status.success() => removed.push(format!("namespace {ns}")),
            Ok(o) => failed.push(format!(
                "namespace {ns}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => failed.push(format!("namespace {ns}: ip: {e}")),
        }
    }
    let sockets = entries(SOCKET_DIR);
    for s in stale(sockets.iter().map(String::as_str), socket_owner, &alive) {
        let path = Path::new(SOCKET_DIR).join(s);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path.display().to_string()),
            Err(e) => failed.push(format!("{}: {e}", path.display())),
        }
    }
    (removed, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_names_are_read_as_a_pid() {
        assert_eq!(netns_owner("emuh-r5426-snd"), Some(5426));
        assert_eq!(netns_owner("emuh-r5426-rcv"), Some(5426));
        assert_eq!(netns_owner("emuh-mm77"), Some(77));
        for other in [
            "emuh-r5426",
            "emuh-rx-snd",
            "emuh-test-snd",
            "ebpfh-1",
            "emuh-r12-snd2",
        ] {
            assert_eq!(netns_owner(other), None, "{other}");
        }
        assert_eq!(socket_owner("ccp-exp-32434"), Some(32434));
        assert_eq!(socket_owner("ccp-exp-dp-32434-0"), Some(32434));
        for other in ["ccp-exp-dp-32434", "ccp-ebpf-0", "ccp-exp-x", "t123-rate-0"] {
            assert_eq!(socket_owner(other), None, "{other}");
        }
    }

    #[test]
    fn a_name_is_stale_only_when_its_shell_is_gone() {
        let names = [
            "emuh-r10-snd",
            "emuh-r10-rcv",
            "emuh-r20-snd",
            "emuh-mm30",
            "other",
        ];
        let alive = |pid| pid == 20;
        assert_eq!(
            stale(names, netns_owner, &alive),
            ["emuh-r10-snd", "emuh-r10-rcv", "emuh-mm30"]
        );
        let sockets = [
            "ccp-exp-10",
            "ccp-exp-dp-20-0",
            "ccp-exp-dp-10-1",
            "ccp-ebpf-0",
        ];
        assert_eq!(
            stale(sockets, socket_owner, &alive),
            ["ccp-exp-10", "ccp-exp-dp-10-1"]
        );
    }
}
