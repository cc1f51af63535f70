use super::*;

#[test]
fn loopback_peers_are_v4_v6_and_v4_mapped_loopback_only() {
    let local = [
        "127.0.0.1:9",
        "127.8.9.10:9",
        "[::1]:9",
        "[::ffff:127.0.0.1]:9",
    ];
    for addr in local {
        let addr: SocketAddr = addr.parse().expect("address");
        assert!(is_loopback_peer(&addr), "{addr}");
    }
    let remote = [
        "10.0.0.7:9",
        "192.0.2.1:9",
        "0.0.0.0:9",
        "[::]:9",
        "[::ffff:10.0.0.7]:9",
        "[fe80::1]:9",
    ];
    for addr in remote {
        let addr: SocketAddr = addr.parse().expect("address");
        assert!(!is_loopback_peer(&addr), "{addr}");
    }
}
