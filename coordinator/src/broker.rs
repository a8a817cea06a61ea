//! The embedded MQTT broker (rumqttd), started in-process by `serve` and `demo` unless
//! `--broker` points at an external one.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context;
use edgecfl_shared::mqtt::MAX_PACKET;
use rumqttd::{Broker, Config, ConnectionSettings, RouterConfig, ServerSettings};

/// rumqttd's settings for an edgecfl fleet: packets up to [`MAX_PACKET`] (a LeNet-5 in f32 is
/// 178 KB; rumqttd's default limit is 20 KB), up to 10 000 connections.
pub fn config(listen: SocketAddr) -> Config {
    let connections = ConnectionSettings {
        connection_timeout_ms: 60_000,
        max_payload_size: MAX_PACKET,
        max_inflight_count: 500,
        auth: None,
        external_auth: None,
        dynamic_filters: true,
    };
    let server = ServerSettings {
        name: "v4".into(),
        listen,
        tls: None,
        next_connection_delay_ms: 1,
        connections,
    };
    Config {
        id: 0,
        router: RouterConfig {
            max_connections: 10_010,
            max_outgoing_packet_count: 200,
            max_segment_size: 64 << 20,
            max_segment_count: 10,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Default::default(),
        },
        v4: Some(HashMap::from([("1".to_string(), server)])),
        ..Default::default()
    }
}

/// Starts rumqttd on `ip:port` in background threads and waits until it accepts connections.
/// The broker lives as long as the process.
pub fn start(ip: IpAddr, port: u16) -> anyhow::Result<SocketAddr> {
    let listen = SocketAddr::new(ip, port);
    // Refuse a taken port up front (rumqttd would only log it from its thread).
    std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen} for the embedded broker (is another broker running? use --port or --broker)"))?;
    let cfg = config(listen);
    std::thread::Builder::new()
        .name("rumqttd".into())
        .spawn(move || {
            let mut broker = Broker::new(cfg);
            if let Err(e) = broker.start() {
                eprintln!("error: embedded broker stopped: {e}");
            }
        })
        .context("cannot start the embedded broker thread")?;
    let probe = if ip.is_unspecified() {
        SocketAddr::new([127, 0, 0, 1].into(), port)
    } else {
        listen
    };
    let start = Instant::now();
    while TcpStream::connect_timeout(&probe, Duration::from_millis(200)).is_err() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(10),
            "the embedded broker did not start listening on {listen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(probe)
}
