//! `ccp-testdp`: the test datapath as a process (its command line is in the library).

fn main() {
    ccp_testdp::main()
}
