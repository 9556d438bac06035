//! The peer acknowledges a lone datagram within `PROMPT_ACK_DELAY`, so the RTT samples the
//! agent sees hold the path's delay, not the peer's ACK timer (`QuicDatapath::transport_config`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ccp_quic::{Config, QuicDatapath, tls, transfer};

/// Sparse writes: one datagram each, far apart compared with loopback's RTT.
const WRITES: u32 = 40;
const GAP: Duration = Duration::from_millis(8);

/// ACK frames received per datagram sent while `WRITES` small writes go out `GAP` apart.
async fn acks_per_datagram(server: SocketAddr, transport: quinn::TransportConfig) -> f64 {
    let mut client = tls::insecure_client_config().expect("client TLS");
    client.transport_config(Arc::new(transport));
    let mut endpoint =
        quinn::Endpoint::client(([127, 0, 0, 1], 0).into()).expect("client endpoint");
    endpoint.set_default_client_config(client);
    let conn = endpoint
        .connect(server, tls::SERVER_NAME)
        .expect("connect")
        .await
        .expect("handshake");
    let mut stream = conn.open_uni().await.expect("stream");
    // Let the handshake's packets and the ACK_FREQUENCY frame settle first.
    stream.write_all(&[0; 100]).await.expect("write");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = conn.stats();
    for _ in 0..WRITES {
        stream.write_all(&[0; 100]).await.expect("write");
        tokio::time::sleep(GAP).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = conn.stats();
    conn.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    let acks = after.frame_rx.acks - before.frame_rx.acks;
    let datagrams = after.udp_tx.datagrams - before.udp_tx.datagrams;
    acks as f64 / datagrams as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_acknowledges_every_lone_datagram_promptly() {
    let (bound_tx, bound) = std::sync::mpsc::channel();
    tokio::spawn(transfer::serve(([127, 0, 0, 1], 0).into(), move |a| {
        let _ = bound_tx.send(a);
    }));
    let addr = bound.recv().expect("server address");
    // No agent: the connections run the fallback, which does not change the peer's ACKs.
    let mut cfg = Config::new(&format!("quich-{}-acks-absent-agent", std::process::id()));
    cfg.bind = cfg
        .bind
        .with_file_name(format!("quich-{}-acks", std::process::id()));
    let dp = QuicDatapath::start(&cfg).expect("datapath");

    let prompt = acks_per_datagram(addr, dp.transport_config()).await;
    let mut quinns_default = dp.transport_config();
    quinns_default.ack_frequency_config(None);
    let delayed = acks_per_datagram(addr, quinns_default).await;
    eprintln!(
        "ACK frames per datagram: asked for prompt ACKs {prompt:.2}, quinn's default {delayed:.2}"
    );
    // Asked, the peer acknowledges each datagram within a millisecond; by default it waits
    // for a second one (8 ms later), so half as many ACKs: the measure tells them apart.
    assert!(
        prompt > 0.85,
        "prompt ACKs: {prompt:.2} ACK frames per datagram"
    );
    assert!(
        delayed < 0.7,
        "quinn's default: {delayed:.2} ACK frames per datagram"
    );
}
