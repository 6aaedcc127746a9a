//! A request body streamed to the origin as the client sends it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// The body of a request to an origin: empty, or fed through a channel.
#[derive(Debug)]
pub struct OriginRequestBody {
    rx: Option<mpsc::Receiver<Result<Bytes, std::io::Error>>>,
    len: Option<u64>,
}

impl OriginRequestBody {
    pub fn empty() -> Self {
        OriginRequestBody {
            rx: None,
            len: Some(0),
        }
    }
}

/// A sender for a streamed body of `len` bytes (if known) and the body itself.
pub fn body_channel(
    len: Option<u64>,
) -> (
    mpsc::Sender<Result<Bytes, std::io::Error>>,
    OriginRequestBody,
) {
    let (tx, rx) = mpsc::channel(4);
    (tx, OriginRequestBody { rx: Some(rx), len })
}

impl Body for OriginRequestBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let Some(rx) = self.rx.as_mut() else {
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => {
                self.rx = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rx.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.len {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
