//! The MQTT link both runtimes (and the system tests) use: one rumqttc connection whose event
//! loop runs in a tokio task that only polls and forwards, so the caller's thread can block in
//! training or in the round loop while keepalives go on.
//!
//! This is transport only: it moves payloads between topics and a channel. The algorithm modules
//! never import it; the protocol it carries is [`crate::protocol`]. Built with the `mqtt` feature.
//!
//! After a connection error the loop waits a second and polls again, which reconnects; every
//! (re)connection re-subscribes and is reported as [`Inbound::Connected`], so a client can
//! announce itself again.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Event, LastWill, MqttOptions, Packet, QoS};
use tokio::runtime::Runtime;

use crate::protocol::{BrokerAddr, MAX_PAYLOAD};

/// Largest MQTT packet either side sends or accepts: the largest payload plus room for the
/// topic and headers. Brokers must allow at least this much (mosquitto: `max_packet_size`).
pub const MAX_PACKET: usize = MAX_PAYLOAD + 4096;

/// Errors of the link.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The tokio runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// The request could not be queued (the event loop is gone).
    #[error("MQTT request failed: {0}")]
    Client(#[from] rumqttc::ClientError),
    /// No connection within the time allowed.
    #[error("no connection to the broker at {addr} after {seconds:.0}s (last error: {last})")]
    Connect {
        /// Broker.
        addr: BrokerAddr,
        /// Seconds waited.
        seconds: f64,
        /// The last connection error seen.
        last: String,
    },
}

/// What the event loop forwards.
#[derive(Debug, Clone)]
pub enum Inbound {
    /// Connected (or reconnected) and subscribed.
    Connected,
    /// The connection failed; the loop retries.
    Disconnected(String),
    /// A message on a subscribed topic.
    Message {
        /// Its topic.
        topic: String,
        /// Its payload.
        payload: Vec<u8>,
        /// True when the broker delivered it as a retained message.
        retained: bool,
    },
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// Broker address.
    pub broker: BrokerAddr,
    /// MQTT client id.
    pub client_id: String,
    /// Filters to subscribe to on every connection (QoS 1).
    pub subscribe: Vec<String>,
    /// Last will: (topic, payload), published retained with QoS 1.
    pub last_will: Option<(String, Vec<u8>)>,
    /// Keepalive interval.
    pub keep_alive: Duration,
}

/// A live MQTT connection.
pub struct Link {
    client: AsyncClient,
    inbox: Receiver<Inbound>,
    runtime: Runtime,
}

impl Link {
    /// Starts the event loop. Returns at once; wait for [`Inbound::Connected`] (or use
    /// [`Link::wait_connected`]).
    pub fn start(opts: LinkOptions) -> Result<Link, LinkError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mqtt")
            .enable_all()
            .build()?;
        let mut mqtt = MqttOptions::new(&opts.client_id, &opts.broker.host, opts.broker.port);
        mqtt.set_max_packet_size(MAX_PACKET, MAX_PACKET)
            .set_keep_alive(opts.keep_alive)
            .set_clean_session(true)
            .set_request_channel_capacity(64)
            .set_inflight(100);
        if let Some((topic, payload)) = &opts.last_will {
            mqtt.set_last_will(LastWill::new(
                topic,
                payload.clone(),
                QoS::AtLeastOnce,
                true,
            ));
        }
        let (client, mut eventloop) = AsyncClient::new(mqtt, 64);
        let (tx, inbox) = channel();
        let sub_client = client.clone();
        let subscribe = opts.subscribe;
        runtime.spawn(async move {
            let tx: Sender<Inbound> = tx;
            loop {
                let forward = match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        for f in &subscribe {
                            // try_: this task is the one that drains the request channel.
                            if let Err(e) = sub_client.try_subscribe(f, QoS::AtLeastOnce) {
                                let _ = tx.send(Inbound::Disconnected(e.to_string()));
                            }
                        }
                        Some(Inbound::Connected)
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => Some(Inbound::Message {
                        topic: p.topic,
                        payload: p.payload.to_vec(),
                        retained: p.retain,
                    }),
                    Ok(_) => None,
                    Err(e) => {
                        let _ = tx.send(Inbound::Disconnected(e.to_string()));
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        None
                    }
                };
                if let Some(m) = forward
                    && tx.send(m).is_err()
                {
                    break; // the Link was dropped
                }
            }
        });
        Ok(Link {
            client,
            inbox,
            runtime,
        })
    }

    /// Waits for the first connection; errors after `timeout` with the last connection error.
    pub fn wait_connected(&self, broker: &BrokerAddr, timeout: Duration) -> Result<(), LinkError> {
        let start = Instant::now();
        let mut last = String::from("none");
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            match self.inbox.recv_timeout(left) {
                Ok(Inbound::Connected) => return Ok(()),
                Ok(Inbound::Disconnected(e)) => last = e,
                Ok(Inbound::Message { .. }) => {}
                Err(_) => {
                    return Err(LinkError::Connect {
                        addr: broker.clone(),
                        seconds: start.elapsed().as_secs_f64(),
                        last,
                    });
                }
            }
        }
    }

    /// The next inbound event, waiting at most until `deadline` (`None` when it passed).
    pub fn recv_until(&self, deadline: Instant) -> Option<Inbound> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.inbox.recv_timeout(left).ok()
    }

    /// The next inbound event, blocking.
    pub fn recv(&self) -> Option<Inbound> {
        self.inbox.recv().ok()
    }

    /// Publishes with QoS 1 (blocks while the request queue is full).
    pub fn publish(&self, topic: &str, payload: Vec<u8>, retain: bool) -> Result<(), LinkError> {
        self.runtime
            .block_on(
                self.client
                    .publish(topic, QoS::AtLeastOnce, retain, payload),
            )
            .map_err(LinkError::from)
    }

    /// Disconnects cleanly (no last will). Queued publishes go out first: the disconnect request
    /// queues behind them.
    pub fn disconnect(self) {
        let _ = self.runtime.block_on(async {
            let r = self.client.disconnect().await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            r
        });
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }
}
