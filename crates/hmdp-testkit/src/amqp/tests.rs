//! The URL helpers on their own, the proxy in front of an echo server, and the vhosts and the
//! proxy against the real broker, spoken to in raw AMQP 0-9-1 (no client library needed).

use std::{io::ErrorKind, net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::*;
use crate::wait_until;

/// How long one step of a conversation with the broker or the proxy may take.
const STEP: Duration = Duration::from_secs(10);

#[test]
fn urls_are_split_and_rebuilt() {
    let url = Url::split("amqp://us%40er:p%3Ass@host:5673/%2F?heartbeat=5#x");
    assert_eq!(url.user(), "us@er");
    assert_eq!(url.host_port, "host:5673");
    assert_eq!(url.path, "/%2F");
    assert_eq!(url.rest, "?heartbeat=5#x");
    assert_eq!(
        url.with_path("/v"),
        "amqp://us%40er:p%3Ass@host:5673/v?heartbeat=5#x"
    );
    assert_eq!(Url::split("amqp://host").user(), "guest");
    assert_eq!(
        Url::split("amqp://guest:guest@127.0.0.1:5672").with_path("/hmdp-test-1-2-ab"),
        "amqp://guest:guest@127.0.0.1:5672/hmdp-test-1-2-ab"
    );
    assert_eq!(percent_encode("a/b c~-._é"), "a%2Fb%20c~-._%C3%A9");
    assert_eq!(percent_decode("a%2Fb%20c%C3%A9%zz"), "a/b cé%zz");
    assert_eq!(json_string("a\"b\\c\n"), r#""a\"b\\c\u000a""#);
}

#[test]
fn socket_addresses_come_from_urls() {
    let addr = |url| amqp_socket_addr(url).to_string();
    assert_eq!(addr("amqp://guest:guest@127.0.0.1:5672"), "127.0.0.1:5672");
    assert_eq!(addr("amqp://127.0.0.1/vhost"), "127.0.0.1:5672");
    assert_eq!(addr("amqp://u:p@[::1]:5673/%2F"), "[::1]:5673");
    assert_eq!(addr("amqp://[::1]"), "[::1]:5672");
}

#[test]
fn test_vhost_names_carry_their_pid() {
    assert_eq!(vhost_pid("hmdp-test-1234-0-ab12cd34"), Some(1234));
    assert_eq!(vhost_pid("hmdp-test-1234-0"), None);
    assert_eq!(vhost_pid("hmdp-test-x-0-ab12cd34"), None);
    assert_eq!(vhost_pid("/"), None);
    assert_eq!(vhost_pid("hmdp-other-1234-0-ab12cd34"), None);
    assert!(process_alive(std::process::id()));
    assert!(!process_alive(dead_pid()));
}

#[tokio::test]
async fn the_proxy_forwards_cuts_and_restores() {
    let echo = echo_server().await;
    let proxy = CuttableProxy::start(echo).await;
    assert_eq!(proxy.target(), echo);
    assert_eq!(
        proxy.via("amqp://u:p@127.0.0.1:5672/v?x=1"),
        format!("amqp://u:p@127.0.0.1:{}/v?x=1", proxy.port())
    );
    for round in 0..3 {
        let mut before = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_echoes(&mut before, round).await;
        assert!(!proxy.is_cut());

        proxy.cut();
        assert!(proxy.is_cut());
        assert_closed(&mut before).await;
        let refused = TcpStream::connect(proxy.addr()).await;
        assert_eq!(
            refused.map(|_| ()).unwrap_err().kind(),
            ErrorKind::ConnectionRefused
        );
        // The port stays the proxy's: a socket without SO_REUSEADDR cannot bind it.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        assert!(socket.bind(proxy.addr()).is_err());
        proxy.cut();

        proxy.restore();
        proxy.restore();
        assert!(!proxy.is_cut());
        let mut after = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_echoes(&mut after, round).await;
        assert_closed(&mut before).await;
    }
    let addr = proxy.addr();
    let mut open = TcpStream::connect(addr).await.unwrap();
    assert_echoes(&mut open, 9).await;
    drop(proxy);
    assert_closed(&mut open).await;
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_connection_to_a_server_that_is_down_is_closed() {
    let down = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let proxy = CuttableProxy::start(down).await;
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_closed(&mut client).await;
}

#[tokio::test]
async fn a_vhost_is_usable_and_deleted_after_drop() {
    let vhost = AmqpVhost::create().await;
    assert!(
        vhost
            .name()
            .starts_with(&format!("hmdp-test-{}-", std::process::id())),
        "{}",
        vhost.name()
    );
    assert_eq!(vhost.url(), format!("{}/{}", amqp_url(), vhost.name()));
    let broker = amqp_socket_addr(&amqp_url());
    open_vhost(broker, vhost.name()).await.unwrap();
    let missing = open_vhost(broker, "hmdp-test-never-made")
        .await
        .unwrap_err();
    assert!(missing.starts_with("Connection.Close 530"), "{missing}");
    let other = AmqpVhost::create().await;
    assert_ne!(other.name(), vhost.name());

    let name = vhost.name().to_owned();
    drop(vhost);
    wait_until(
        Duration::from_secs(60),
        "the dropped vhost deleted",
        async || {
            open_vhost(broker, &name)
                .await
                .is_err_and(|e| e.contains("530"))
        },
    )
    .await;
    open_vhost(broker, other.name()).await.unwrap();
}

#[tokio::test]
async fn stale_test_vhosts_are_deleted() {
    let live = AmqpVhost::create().await;
    let stale = format!("{VHOST_PREFIX}{}-0-deadbeef", dead_pid());
    rabbitmqctl(&["-q", "add_vhost", &stale], None).await;

    tokio::task::spawn_blocking(clean_stale_vhosts)
        .await
        .unwrap();
    let listed = rabbitmqctl(&["-q", "list_vhosts", "name"], None).await;
    let names: Vec<&str> = listed.lines().map(str::trim).collect();
    assert!(!names.contains(&stale.as_str()), "{stale} left: {names:?}");
    assert!(names.contains(&live.name()), "{} deleted", live.name());
}

#[tokio::test]
async fn the_proxy_in_front_of_the_broker() {
    let vhost = AmqpVhost::create().await;
    let broker = amqp_socket_addr(&amqp_url());
    let proxy = CuttableProxy::start(broker).await;
    assert_eq!(
        proxy.via(&vhost.url()),
        vhost
            .url()
            .replace(&broker.to_string(), &proxy.addr().to_string())
    );

    let mut open = open_vhost(proxy.addr(), vhost.name()).await.unwrap();
    proxy.cut();
    assert_closed(&mut open).await;
    let refused = open_vhost(proxy.addr(), vhost.name()).await.unwrap_err();
    assert!(refused.contains("refused"), "{refused}");

    proxy.restore();
    let mut again = open_vhost(proxy.addr(), vhost.name()).await.unwrap();
    // Still open: a heartbeat-less connection the broker keeps until told otherwise.
    let mut byte = [0u8; 1];
    let idle = tokio::time::timeout(Duration::from_millis(200), again.read(&mut byte)).await;
    assert!(idle.is_err(), "the restored connection closed: {idle:?}");
}

#[tokio::test]
async fn a_private_node_restarts_and_survives_a_kill() {
    let started = std::time::Instant::now();
    let mut node = RabbitNode::start().await;
    eprintln!("started {} in {:?}", node.node_name(), started.elapsed());
    assert_eq!(
        node.url(),
        format!("amqp://guest:guest@127.0.0.1:{}", node.port())
    );
    assert_eq!(amqp_socket_addr(&node.url()), node.addr());
    let mut open = open_vhost_as(&node.url(), node.addr(), "/").await.unwrap();

    let restarted = std::time::Instant::now();
    node.restart().await;
    eprintln!("restarted in {:?}", restarted.elapsed());
    assert_closed(&mut open).await;
    let mut open = open_vhost_as(&node.url(), node.addr(), "/").await.unwrap();

    node.kill().await;
    assert!(!node.is_running());
    assert_closed(&mut open).await;
    assert!(open_vhost_as(&node.url(), node.addr(), "/").await.is_err());
    let after_kill = std::time::Instant::now();
    node.restart().await;
    eprintln!("started after a kill in {:?}", after_kill.elapsed());
    assert!(node.is_running());
    open_vhost_as(&node.url(), node.addr(), "/").await.unwrap();
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// A server on a free port that sends back whatever it reads.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    addr
}

async fn assert_echoes(stream: &mut TcpStream, round: u8) {
    let sent = [b'p', b'i', b'n', b'g', round];
    stream.write_all(&sent).await.unwrap();
    let mut got = [0u8; 5];
    tokio::time::timeout(STEP, stream.read_exact(&mut got))
        .await
        .expect("an echo in time")
        .unwrap();
    assert_eq!(got, sent);
}

/// Asserts that the peer closed `stream` (end of stream or a reset) within a step.
async fn assert_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(STEP, stream.read(&mut buf)).await {
            Err(_) => panic!("the connection is still open after {STEP:?}"),
            Ok(Ok(0) | Err(_)) => return,
            // Whatever was already on its way (a broker's last frame).
            Ok(Ok(_)) => continue,
        }
    }
}

/// Connects to `addr` and opens `vhost` as the user of [`amqp_url`], in raw AMQP 0-9-1; the
/// open connection, or what went wrong (a refused connect, the broker's Connection.Close).
async fn open_vhost(addr: SocketAddr, vhost: &str) -> Result<TcpStream, String> {
    open_vhost_as(&amqp_url(), addr, vhost).await
}

/// [`open_vhost`] as the user of `url`.
async fn open_vhost_as(url: &str, addr: SocketAddr, vhost: &str) -> Result<TcpStream, String> {
    let url = Url::split(url);
    let user = url.user();
    let password = url
        .userinfo
        .and_then(|info| info.split_once(':'))
        .map(|(_, password)| percent_decode(password))
        .unwrap_or_else(|| "guest".into());
    let step = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        stream.write_all(b"AMQP\0\0\x09\x01").await.unwrap();
        expect_method(&mut stream, (10, 10), "Connection.Start").await?;

        let mut start_ok = method(10, 11);
        start_ok.extend(0u32.to_be_bytes()); // client properties: an empty table
        short_string(&mut start_ok, "PLAIN");
        let response = format!("\0{user}\0{password}");
        start_ok.extend((response.len() as u32).to_be_bytes());
        start_ok.extend(response.as_bytes());
        short_string(&mut start_ok, "en_US");
        send_method(&mut stream, &start_ok).await;

        let tune = expect_method(&mut stream, (10, 30), "Connection.Tune").await?;
        let mut tune_ok = method(10, 31);
        tune_ok.extend(&tune[4..10]); // the broker's channel-max and frame-max
        tune_ok.extend(0u16.to_be_bytes()); // no heartbeats
        send_method(&mut stream, &tune_ok).await;

        let mut open = method(10, 40);
        short_string(&mut open, vhost);
        short_string(&mut open, "");
        open.push(0);
        send_method(&mut stream, &open).await;
        expect_method(&mut stream, (10, 41), "Connection.Open-Ok").await?;
        Ok(stream)
    };
    tokio::time::timeout(STEP, step)
        .await
        .unwrap_or_else(|_| Err(format!("no answer from {addr} within {STEP:?}")))
}

fn method(class: u16, method: u16) -> Vec<u8> {
    let mut payload = class.to_be_bytes().to_vec();
    payload.extend(method.to_be_bytes());
    payload
}

fn short_string(payload: &mut Vec<u8>, s: &str) {
    payload.push(u8::try_from(s.len()).unwrap());
    payload.extend(s.as_bytes());
}

async fn send_method(stream: &mut TcpStream, payload: &[u8]) {
    let mut frame = vec![1u8, 0, 0]; // a method frame on channel 0
    frame.extend((payload.len() as u32).to_be_bytes());
    frame.extend(payload);
    frame.push(0xCE);
    // A broker that has closed the connection shows in the next read.
    let _ = stream.write_all(&frame).await;
}

/// Reads the next frame and returns its payload if it is the method `want`; a
/// Connection.Close or anything else is an error that says what came instead.
async fn expect_method(
    stream: &mut TcpStream,
    want: (u16, u16),
    name: &str,
) -> Result<Vec<u8>, String> {
    let mut header = [0u8; 7];
    stream
        .read_exact(&mut header)
        .await
        .map_err(|e| format!("waiting for {name}: {e}"))?;
    let size = u32::from_be_bytes(header[3..7].try_into().unwrap()) as usize;
    let mut payload = vec![0u8; size + 1];
    stream
        .read_exact(&mut payload)
        .await
        .map_err(|e| format!("reading {name}: {e}"))?;
    assert_eq!(payload.pop(), Some(0xCE), "frame end");
    let class = u16::from_be_bytes([payload[0], payload[1]]);
    let id = u16::from_be_bytes([payload[2], payload[3]]);
    if header[0] == 1 && (class, id) == want {
        return Ok(payload);
    }
    if (class, id) == (10, 50) {
        let code = u16::from_be_bytes([payload[4], payload[5]]);
        let text = String::from_utf8_lossy(&payload[7..7 + payload[6] as usize]);
        return Err(format!("Connection.Close {code} instead of {name}: {text}"));
    }
    Err(format!(
        "frame type {} method {class}.{id} instead of {name}",
        header[0]
    ))
}
