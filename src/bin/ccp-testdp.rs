fn main() {
    ccp_testdp::main()
}
