//! A request body sent to the origin: read whole beforehand, or streamed as the client
//! sends it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// The body of a request to an origin: empty, in hand, or fed through a channel.
#[derive(Debug)]
pub struct OriginRequestBody {
    /// Bytes in hand, sent before anything from `rx`.
    full: Option<Bytes>,
    rx: Option<mpsc::Receiver<Result<Bytes, std::io::Error>>>,
    len: Option<u64>,
}

impl OriginRequestBody {
    pub fn empty() -> Self {
        OriginRequestBody {
            full: None,
            rx: None,
            len: Some(0),
        }
    }

    /// A body read whole before the request is sent.
    pub fn full(bytes: Bytes) -> Self {
        OriginRequestBody {
            len: Some(bytes.len() as u64),
            full: (!bytes.is_empty()).then_some(bytes),
            rx: None,
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
    (
        tx,
        OriginRequestBody {
            full: None,
            rx: Some(rx),
            len,
        },
    )
}

impl Body for OriginRequestBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(b) = self.full.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
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
        self.full.is_none() && self.rx.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.len {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
