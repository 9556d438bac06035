//! Sequences of datapath messages from several datapaths through the agent's dispatch, with
//! the real algorithms and a recording transport: the runtime must never panic. The input is
//! read as operations (well-formed messages with fuzzed fields, or raw bytes), so the fuzzer
//! reaches flows, reports, priorities and hand-offs rather than only the decoder's errors.
#![no_main]

use ccp_agent::cli::Cli;
use ccp_agent::runtime::{Recorder, Runtime};
use ccp_wire::{CreateMsg, PriorityClass, PriorityMsg};
use clap::Parser;
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use std::rc::Rc;

const ALGS: [&str; 7] = ["cubic", "proteus-p", "proteus-s", "proteus-h", "ledbat++", "fixed", "reno"];

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes([self.byte()?, self.byte()?, self.byte()?, self.byte()?]))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from(self.u32()?) << 32 | u64::from(self.u32()?))
    }
}

fn message(input: &mut Input) -> Option<Vec<u8>> {
    let op = input.byte()?;
    let sid = u32::from(input.byte()? % 8);
    Some(match op % 7 {
        0 => ccp_wire::encode_ready(0),
        1 => ccp_wire::encode_create(&CreateMsg {
            sid,
            init_cwnd: input.u32()?,
            mss: input.u32()? % 9000,
            src_ip: input.u32()?,
            src_port: input.u32()?,
            dst_ip: input.u32()?,
            dst_port: input.u32()?,
            cong_alg: Some(ALGS[usize::from(input.byte()?) % ALGS.len()].to_owned()),
        }),
        2 => {
            let uid = u32::from(input.byte()? % 6);
            let n = usize::from(input.byte()? % 20);
            let fields: Option<Vec<u64>> = (0..n).map(|_| input.u64()).collect();
            ccp_wire::encode_measure(sid, uid, &fields?)
        }
        3 => ccp_wire::encode_priority(&PriorityMsg {
            sid,
            class: PriorityClass::from_code(u32::from(input.byte()? % 3))?,
            flags: 0,
            hybrid_threshold_bytes_per_sec: input.u64()?,
        }),
        4 => ccp_wire::encode_close(sid),
        5 => ccp_wire::encode_sync(sid, 0),
        _ => {
            let n = usize::from(input.byte()?);
            (0..n).map(|_| input.byte()).collect::<Option<Vec<u8>>>()?
        }
    })
}

thread_local! {
    static AGENT: RefCell<(Runtime<Recorder>, Rc<Recorder>)> = RefCell::new({
        let args = Cli::parse_from(["ccp-agent", "--default", "cubic"]).run;
        let recorder = Rc::new(Recorder::default());
        let runtime = ccp_agent::agent::build_runtime(&args, recorder.clone()).expect("runtime");
        (runtime, recorder)
    });
}

fuzz_target!(|data: &[u8]| {
    AGENT.with(|agent| {
        let (runtime, recorder) = &mut *agent.borrow_mut();
        let mut input = Input(data);
        while let Some(who) = input.byte() {
            let Some(msg) = message(&mut input) else { break };
            runtime.handle_datagram(&msg, &u32::from(who % 3));
        }
        recorder.sent.borrow_mut().clear();
    });
});
