//! CONNECT tunnels (forward mode): a TCP connection to the named host and port, then bytes
//! copied both ways until either side closes. Only ports in `connect.allowed_ports` are
//! reachable, and only addresses the destination guard (`crate::destination`) allows for
//! this client, so the proxy can't be used to reach arbitrary services.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::client::body::ReadSide;
use crate::client::transport::{ClientRead, ClientWrite};
use crate::destination::{self, Blocked, ClientClass, DestinationPolicy, Refusal};
use crate::resolver::Resolver;

/// How a tunnel ended, for the log.
#[derive(Debug)]
pub struct TunnelResult {
    pub status: StatusCode,
    pub bytes_to_client: u64,
    /// Set when the destination guard refused the destination (the status is then 403).
    pub refused: Option<Refusal>,
}

/// What a tunnel may reach and how long it may take.
pub struct TunnelRules<'a> {
    /// `connect.allowed_ports`.
    pub allowed_ports: &'a [u16],
    pub destinations: &'a DestinationPolicy,
    /// Names to addresses (cached).
    pub resolver: &'a Resolver,
    /// Bounds name resolution and the TCP connect together.
    pub connect_timeout: Duration,
    /// A tunnel silent both ways this long is closed.
    pub idle_timeout: Duration,
}

/// Opens the tunnel to `host:port` for a client of `class` and runs it to the end. `rs`
/// may hold bytes the client sent after the CONNECT head; they go to the server first.
pub async fn run(
    rs: ReadSide<ClientRead>,
    mut wr: ClientWrite,
    host: &str,
    port: u16,
    class: ClientClass,
    rules: TunnelRules<'_>,
) -> TunnelResult {
    let TunnelRules {
        allowed_ports,
        destinations,
        resolver,
        connect_timeout,
        idle_timeout,
    } = rules;
    let refuse = |status: StatusCode| TunnelResult {
        status,
        bytes_to_client: 0,
        refused: None,
    };
    // A refusal's answer, counted in the access log's bytes as any response is.
    async fn answer(wr: &mut ClientWrite, status: StatusCode, bytes: &[u8]) -> TunnelResult {
        let sent = match wr.write_all(bytes).await {
            Ok(()) => bytes.len() as u64,
            Err(_) => 0,
        };
        TunnelResult {
            status,
            bytes_to_client: sent,
            refused: None,
        }
    }
    if !allowed_ports.contains(&port) {
        let allowed: Vec<String> = allowed_ports.iter().map(u16::to_string).collect();
        let why = format!(
            "CONNECT to port {port} is not allowed: [connect] allowed_ports is [{}]",
            allowed.join(", ")
        );
        return answer(&mut wr, StatusCode::FORBIDDEN, forbidden(&why).as_bytes()).await;
    }
    // Resolve once, check every address, connect to exactly those.
    let open = async {
        let addrs = destinations.resolve(resolver, host, port, class).await?;
        destination::connect(&addrs).await.map_err(Blocked::Resolve)
    };
    let server = match tokio::time::timeout(connect_timeout, open).await {
        Ok(Ok(s)) => s,
        Ok(Err(Blocked::Refused(why))) => {
            let text = forbidden(why.explain());
            let sent = answer(&mut wr, StatusCode::FORBIDDEN, text.as_bytes()).await;
            return TunnelResult {
                refused: Some(why),
                ..sent
            };
        }
        // The name did not resolve, or no address accepted: as before the guard (a name
        // server that did not answer in time is a timeout, below).
        Ok(Err(Blocked::Resolve(e))) if e.kind() != std::io::ErrorKind::TimedOut => {
            let head =
                b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            return answer(&mut wr, StatusCode::BAD_GATEWAY, head).await;
        }
        Ok(Err(Blocked::Resolve(_))) | Err(_) => {
            let head =
                b"HTTP/1.1 504 Gateway Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            return answer(&mut wr, StatusCode::GATEWAY_TIMEOUT, head).await;
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
    let Some(client) = rd.reunite(wr) else {
        return refuse(StatusCode::OK);
    };
    let mut server = server;
    if !buf.is_empty() && server.write_all(&buf).await.is_err() {
        return refuse(StatusCode::OK);
    }
    let to_client = relay(client, server, idle_timeout).await;
    TunnelResult {
        status: StatusCode::OK,
        bytes_to_client: to_client,
        refused: None,
    }
}

/// Copies bytes both ways between `client` and `server` until either side closes, or until
/// neither has sent anything for `idle_timeout` (so silent tunnels can't hold connection
/// slots forever). Returns the bytes that went to the client. Used by CONNECT tunnels and
/// by upgraded connections (`crate::upgrade`).
pub async fn relay<C, S>(client: C, server: S, idle_timeout: Duration) -> u64
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let last = Arc::new(AtomicU64::new(0));
    let epoch = tokio::time::Instant::now();
    let sent = Arc::new(AtomicU64::new(0));
    let mut client = Activity::new(client, Arc::clone(&last), epoch, Arc::clone(&sent));
    let mut server = Activity::new(
        server,
        Arc::clone(&last),
        epoch,
        Arc::new(AtomicU64::new(0)),
    );
    let copy = tokio::io::copy_bidirectional(&mut client, &mut server);
    tokio::pin!(copy);
    loop {
        let since = Duration::from_millis(last.load(Ordering::Relaxed));
        let deadline = epoch + since + idle_timeout;
        tokio::select! {
            r = &mut copy => break r.map(|(_, to_client)| to_client).unwrap_or_else(|_| sent.load(Ordering::Relaxed)),
            _ = tokio::time::sleep_until(deadline) => {
                let idle = epoch.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
                if idle >= idle_timeout {
                    break sent.load(Ordering::Relaxed);
                }
            }
        }
    }
}

/// A whole 403 response, its body saying why (and which setting decided it).
fn forbidden(why: &str) -> String {
    let text = format!("403 Forbidden\n{why}\n");
    format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )
}

/// A stream that notes when bytes last moved through it.
struct Activity<S> {
    inner: S,
    last: Arc<AtomicU64>,
    epoch: tokio::time::Instant,
    written: Arc<AtomicU64>,
}

impl<S> Activity<S> {
    fn new(
        inner: S,
        last: Arc<AtomicU64>,
        epoch: tokio::time::Instant,
        written: Arc<AtomicU64>,
    ) -> Self {
        Activity {
            inner,
            last,
            epoch,
            written,
        }
    }

    fn touch(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Activity<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Activity<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = r {
            if n > 0 {
                self.written.fetch_add(n as u64, Ordering::Relaxed);
                self.touch();
            }
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
