//! CONNECT tunnels (forward mode): a TCP connection to the named host and port, then bytes
//! copied both ways until either side closes. Only ports in `connect.allowed_ports` are
//! reachable, so the proxy can't be used to reach arbitrary services.

use std::time::Duration;

use http::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::client::body::ReadSide;

/// How a tunnel ended, for the log.
#[derive(Debug)]
pub struct TunnelResult {
    pub status: StatusCode,
    pub bytes_to_client: u64,
}

/// Opens the tunnel and runs it to the end. `rs` may hold bytes the client sent after the
/// CONNECT head; they go to the server first.
pub async fn run(
    rs: ReadSide<OwnedReadHalf>,
    mut wr: OwnedWriteHalf,
    host: &str,
    port: u16,
    allowed_ports: &[u16],
    connect_timeout: Duration,
) -> TunnelResult {
    let refuse = |status: StatusCode| TunnelResult {
        status,
        bytes_to_client: 0,
    };
    if !allowed_ports.contains(&port) {
        let _ = wr
            .write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
        return refuse(StatusCode::FORBIDDEN);
    }
    let server = match tokio::time::timeout(connect_timeout, TcpStream::connect((host, port))).await
    {
        Ok(Ok(s)) => s,
        Ok(Err(_)) => {
            let _ = wr
                .write_all(
                    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            return refuse(StatusCode::BAD_GATEWAY);
        }
        Err(_) => {
            let _ = wr
                .write_all(b"HTTP/1.1 504 Gateway Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
            return refuse(StatusCode::GATEWAY_TIMEOUT);
        }
    };
    let _ = server.set_nodelay(true);
    if wr
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return refuse(StatusCode::OK);
    }
    let ReadSide { io: rd, buf } = rs;
    let Ok(mut client) = rd.reunite(wr) else {
        return refuse(StatusCode::OK);
    };
    let mut server = server;
    if !buf.is_empty() && server.write_all(&buf).await.is_err() {
        return refuse(StatusCode::OK);
    }
    let (_, to_client) = tokio::io::copy_bidirectional(&mut client, &mut server)
        .await
        .unwrap_or((0, 0));
    TunnelResult {
        status: StatusCode::OK,
        bytes_to_client: to_client,
    }
}
