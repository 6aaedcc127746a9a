//! Upgrades through trove (RFC 9110 §7.8), with a real WebSocket handshake (RFC 6455 §4)
//! and frames both ways: a WebSocket server on loopback, a WebSocket client written here,
//! trove in between in reverse and in forward mode.

mod kit;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use kit::Trove;

/// RFC 6455 §1.3: appended to the client's key before hashing.
const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// SHA-1 (FIPS 180-4), only for `Sec-WebSocket-Accept`: a test needs no crate for it.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

fn accept_for(key: &str) -> String {
    base64(&sha1(format!("{key}{WS_GUID}").as_bytes()))
}

#[test]
fn the_handshake_digest_is_rfc_6455s_example() {
    assert_eq!(
        accept_for("dGhlIHNhbXBsZSBub25jZQ=="),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
}

/// Reads up to the end of a head; the head as text, and any bytes after it.
async fn read_head(s: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Some((String::from_utf8_lossy(&buf).into_owned(), rest));
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// One WebSocket frame (FIN set), masked when a client sends it (RFC 6455 §5.3).
fn frame(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    assert!(payload.len() < 126, "short frames only");
    let mut f = vec![0x80 | opcode, payload.len() as u8];
    match mask {
        Some(m) => {
            f[1] |= 0x80;
            f.extend_from_slice(&m);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ m[i % 4]));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

/// Reads one short frame from `pending` and then `s`: its opcode and unmasked payload.
async fn read_frame(s: &mut TcpStream, pending: &mut Vec<u8>) -> Option<(u8, Vec<u8>)> {
    loop {
        if pending.len() >= 2 {
            let masked = pending[1] & 0x80 != 0;
            let len = usize::from(pending[1] & 0x7f);
            let need = 2 + if masked { 4 } else { 0 } + len;
            if pending.len() >= need {
                let opcode = pending[0] & 0x0f;
                let body: Vec<u8> = if masked {
                    let m = [pending[2], pending[3], pending[4], pending[5]];
                    pending[6..need]
                        .iter()
                        .enumerate()
                        .map(|(i, b)| b ^ m[i % 4])
                        .collect()
                } else {
                    pending[2..need].to_vec()
                };
                pending.drain(..need);
                return Some((opcode, body));
            }
        }
        let mut chunk = [0u8; 1024];
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        pending.extend_from_slice(&chunk[..n]);
    }
}

/// A WebSocket echo server: answers the handshake, greets with a text frame in the same
/// write as its 101 (so bytes that follow the head must reach the client), then echoes
/// every frame until a close. A request for `/plain` is refused an upgrade with a 426.
async fn ws_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let Some((head, mut pending)) = read_head(&mut s).await else {
                    return;
                };
                let upgrading = field(&head, "upgrade")
                    .is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
                    && field(&head, "connection")
                        .is_some_and(|c| c.to_ascii_lowercase().contains("upgrade"));
                let key = field(&head, "sec-websocket-key");
                let (true, Some(key), false) = (upgrading, key, head.starts_with("GET /plain"))
                else {
                    let body = "upgrade refused";
                    let _ = s
                        .write_all(
                            format!(
                                "HTTP/1.1 426 Upgrade Required\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                    return;
                };
                let mut out = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                    accept_for(key)
                )
                .into_bytes();
                out.extend(frame(1, b"welcome", None));
                if s.write_all(&out).await.is_err() {
                    return;
                }
                while let Some((op, payload)) = read_frame(&mut s, &mut pending).await {
                    if op == 8 {
                        let _ = s.write_all(&frame(8, &payload, None)).await;
                        return;
                    }
                    if s.write_all(&frame(op, &payload, None)).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// Opens a WebSocket through trove to `target` (origin-form or absolute); the stream and
/// whatever arrived after the 101's head.
async fn ws_connect(trove: &Trove, target: &str, host: &str) -> (TcpStream, String, Vec<u8>) {
    let mut s = TcpStream::connect(trove.addr).await.unwrap();
    let req = format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let (head, rest) = tokio::time::timeout(Duration::from_secs(10), read_head(&mut s))
        .await
        .expect("a response in time")
        .expect("a response head");
    (s, head, rest)
}

/// The handshake holds (the accept digest matches the key), the origin's greeting sent
/// with its 101 arrives, and frames go both ways.
async fn talks(mut s: TcpStream, head: &str, mut pending: Vec<u8>) {
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(
        field(head, "sec-websocket-accept"),
        Some(accept_for(KEY).as_str())
    );
    assert!(field(head, "upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket")));
    let greeting = read_frame(&mut s, &mut pending).await;
    assert_eq!(greeting, Some((1, b"welcome".to_vec())));
    for msg in [&b"hello"[..], b"second message", b""] {
        s.write_all(&frame(1, msg, Some([1, 2, 3, 4])))
            .await
            .unwrap();
        let echoed =
            tokio::time::timeout(Duration::from_secs(10), read_frame(&mut s, &mut pending))
                .await
                .expect("an echo in time");
        assert_eq!(echoed, Some((1, msg.to_vec())));
    }
    s.write_all(&frame(8, &[3, 232], Some([9, 9, 9, 9])))
        .await
        .unwrap();
    assert_eq!(
        read_frame(&mut s, &mut pending).await,
        Some((8, vec![3, 232]))
    );
}

#[tokio::test]
async fn a_websocket_passes_through_a_reverse_proxy_9110_7_8() {
    let origin = ws_server().await;
    let trove = Trove::reverse_to(origin, |_| {}).await;
    let (s, head, rest) = ws_connect(&trove, "/chat", "test.local").await;
    talks(s, &head, rest).await;
    let line = &trove.log_lines(1).await[0];
    assert!(line.contains(" TCP_TUNNEL/101 "), "{line}");
    assert!(line.contains(" GET "), "{line}");
}

#[tokio::test]
async fn a_websocket_passes_through_a_forward_proxy_9110_7_8() {
    let origin = ws_server().await;
    let trove = Trove::forward(|_| {}).await;
    let url = format!("http://{origin}/chat");
    let (s, head, rest) = ws_connect(&trove, &url, &origin.to_string()).await;
    talks(s, &head, rest).await;
    assert!(trove.log_lines(1).await[0].contains(" TCP_TUNNEL/101 "));
}

/// An origin that does not switch answers as to any request; the client gets that answer.
#[tokio::test]
async fn an_upgrade_the_origin_declines_gets_its_answer() {
    let origin = ws_server().await;
    let trove = Trove::reverse_to(origin, |_| {}).await;
    let (mut s, head, mut rest) = ws_connect(&trove, "/plain", "test.local").await;
    assert!(head.starts_with("HTTP/1.1 426"), "{head}");
    let mut body = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut body)).await;
    rest.extend(body);
    assert!(String::from_utf8_lossy(&rest).contains("upgrade refused"));
}

/// A tunnel silent both ways for the idle timeout is closed, as a CONNECT tunnel is.
#[tokio::test]
async fn an_idle_websocket_is_closed_after_the_idle_timeout() {
    let origin = ws_server().await;
    let trove = Trove::reverse_to(origin, |s| {
        s.timeouts.client_idle = Duration::from_millis(300);
    })
    .await;
    let (mut s, head, mut pending) = ws_connect(&trove, "/chat", "test.local").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_eq!(
        read_frame(&mut s, &mut pending).await,
        Some((1, b"welcome".to_vec()))
    );
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the silent tunnel was not closed");
}

/// A client outside the access list gets no tunnel.
#[tokio::test]
async fn an_upgrade_from_a_refused_client_is_denied() {
    let origin = ws_server().await;
    let trove = Trove::reverse_to(origin, |s| {
        s.access.allow = vec!["10.9.9.9/32".parse().unwrap()];
    })
    .await;
    let (_s, head, _) = ws_connect(&trove, "/chat", "test.local").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
}
