//! `datapath-setup/include/ccp_priority.h` builds the same bytes as the agent's own
//! encoder, and its setsockopt payload has the layout the BPF program reads. Needs a C
//! compiler (`cc`); skips, saying so, without one.

use std::path::PathBuf;
use std::process::Command;

use ccp_wire::{PriorityClass, PriorityMsg, encode_priority};

const PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include "ccp_priority.h"

_Static_assert(sizeof(struct ccp_priority_opt) == 16, "setsockopt payload is 16 bytes");
_Static_assert(offsetof(struct ccp_priority_opt, hybrid_threshold_bytes_per_sec) == 8,
               "threshold at offset 8");

int main(void)
{
    static const struct { unsigned sid, cls; unsigned long long thr; } cases[] = {
        { 3, CCP_PRIO_HYBRID, 1250000ULL },
        { 1, CCP_PRIO_SCAVENGER, 0 },
        { 0xfffffffeu, CCP_PRIO_PRIMARY, 0x0102030405060708ULL },
    };
    char buf[CCP_PRIORITY_MSG_LEN];
    for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int n = ccp_priority_msg_write(buf, cases[c].sid, cases[c].cls, 0, cases[c].thr);
        for (int i = 0; i < n; i++)
            printf("%02x", (unsigned char)buf[i]);
        printf("\n");
    }
    return 0;
}
"#;

#[test]
fn c_header_encodes_priority_messages_like_the_rust_encoder() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("ebpfh-prio-hdr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("t.c");
    let exe = dir.join("t");
    std::fs::write(&src, PROGRAM).expect("write C");
    let cc = Command::new("cc")
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(root.join("datapath-setup/include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output();
    let Ok(cc) = cc else {
        eprintln!("SKIPPED: no C compiler (cc)");
        return;
    };
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().expect("runs");
    let _ = std::fs::remove_dir_all(&dir);
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let want: Vec<String> = [
        (3, PriorityClass::Hybrid, 1_250_000),
        (1, PriorityClass::Scavenger, 0),
        (0xffff_fffe, PriorityClass::Primary, 0x0102_0304_0506_0708),
    ]
    .into_iter()
    .map(|(sid, class, thr)| {
        hex(encode_priority(&PriorityMsg {
            sid,
            class,
            flags: 0,
            hybrid_threshold_bytes_per_sec: thr,
        }))
    })
    .collect();
    assert_eq!(got, want);
    // The byte-level example in the header's comment.
    assert_eq!(got[0], "20001800030000000200000000000000d012130000000000");
}
