//! One request per connection: the shim writes its JSON and half-closes, so the request is
//! everything up to EOF. Reading it is bounded in size and in time, and every way it can go
//! wrong is an error that knows its CNI code.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use super::pending::Ticket;
use crate::cni::{CniCode, ErrorCode};

/// Requests are small (a CNI config and the CNI_* variables); anything larger is not the
/// shim's, and is refused without being read whole.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// The default time a connection has to deliver its whole request (`--socket-read-timeout`).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Why no request could be read from a connection.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(
        "the request is larger than the agent's limit of {} MiB, so it was not read; \
         a CNI config that large is not one the shim sends: check what connects to the socket",
        MAX_REQUEST_BYTES >> 20
    )]
    TooLarge,
    #[error(
        "the request did not arrive within {} s of connecting (the shim sends it at once); \
         the connection was closed",
        .0.as_secs()
    )]
    TimedOut(Duration),
    #[error(
        "more than {0} connections were waiting to send their request, and this was the oldest; \
         it was closed so that new requests are served"
    )]
    Evicted(usize),
    #[error("reading the request: {0}")]
    Io(#[source] io::Error),
}

impl CniCode for ReadError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            ReadError::TooLarge => ErrorCode::InvalidNetworkConfig,
            ReadError::TimedOut(_) | ReadError::Evicted(_) => ErrorCode::TryAgainLater,
            ReadError::Io(_) => ErrorCode::IoFailure,
        }
    }
}

/// The request buffer's first size: a shim request with a large configlist fits.
const INITIAL_READ_BYTES: usize = 16 << 10;

/// Reads one request: up to EOF, at most [`MAX_REQUEST_BYTES`], before `deadline`, unless
/// the connection is evicted first. `timeout` is only for the message.
pub async fn read_request<R: AsyncRead + Unpin>(
    stream: &mut R,
    limit: usize,
    deadline: Instant,
    timeout: Duration,
    ticket: &Ticket,
) -> Result<Vec<u8>, ReadError> {
    let read = async {
        // Room for a whole ordinary request up front: one read takes it, where a growing
        // buffer took five (32, 32, 64, 128 bytes, ...).
        let mut buf = Vec::with_capacity(limit.min(INITIAL_READ_BYTES) + 1);
        // One byte past the limit tells "exactly the limit" from "over it".
        (&mut *stream).take(limit as u64 + 1).read_to_end(&mut buf).await.map(|_| buf)
    };
    tokio::select! {
        read = tokio::time::timeout_at(deadline, read) => match read {
            Err(_) => Err(ReadError::TimedOut(timeout)),
            Ok(Err(e)) => Err(ReadError::Io(e)),
            Ok(Ok(buf)) if buf.len() > limit => Err(ReadError::TooLarge),
            Ok(Ok(buf)) => Ok(buf),
        },
        () = ticket.evicted() => Err(ReadError::Evicted(ticket.bound())),
    }
}

/// How much of a refused request is read and thrown away, at most, before the connection is
/// closed (see [`discard_rest`]).
pub const MAX_DISCARD_BYTES: usize = 4 * MAX_REQUEST_BYTES;

/// Reads and discards what the peer still sends, until EOF, `max` bytes, `deadline` or
/// eviction: a client that writes its whole (moderately oversized) request before reading, as
/// the shim does, then finds the answer instead of a broken pipe. Nothing is kept, and a flood
/// is cut off after `max` bytes.
pub async fn discard_rest<R: AsyncRead + Unpin>(
    stream: &mut R,
    max: usize,
    deadline: Instant,
    ticket: &Ticket,
) {
    let mut sink = vec![0u8; 64 << 10];
    let drain = async {
        let mut left = max;
        while left > 0 {
            let room = left.min(sink.len());
            match stream.read(&mut sink[..room]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left -= n,
            }
        }
    };
    tokio::select! {
        _ = tokio::time::timeout_at(deadline, drain) => {}
        () = ticket.evicted() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::pending::Pending;
    use tokio::io::AsyncWriteExt;

    const LONG: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_request_is_everything_up_to_eof() {
        let pending = Pending::new(4);
        let (ticket, _) = pending.register();
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            client.write_all(br#"{"command":"ADD","config":"{}"}"#).await.unwrap();
            client.shutdown().await.unwrap();
        });
        let got = read_request(&mut server, 1024, Instant::now() + LONG, LONG, &ticket).await.unwrap();
        writer.await.unwrap();
        assert_eq!(got, br#"{"command":"ADD","config":"{}"}"#);
    }

    #[tokio::test]
    async fn a_request_of_exactly_the_limit_is_read_and_one_byte_more_is_refused() {
        let pending = Pending::new(4);
        for (len, refused) in [(100, false), (101, true)] {
            let (ticket, _) = pending.register();
            let (mut client, mut server) = tokio::io::duplex(1 << 16);
            client.write_all(&vec![b' '; len]).await.unwrap();
            client.shutdown().await.unwrap();
            let got = read_request(&mut server, 100, Instant::now() + LONG, LONG, &ticket).await;
            assert_eq!(matches!(got, Err(ReadError::TooLarge)), refused, "{len} bytes: {got:?}");
        }
    }

    #[tokio::test]
    async fn an_oversized_request_is_refused_without_reading_it_whole() {
        let pending = Pending::new(4);
        let (ticket, _) = pending.register();
        // The writer never finishes (no EOF): the refusal must not wait for one.
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        let writer = tokio::spawn(async move {
            let chunk = vec![b'x'; 1 << 16];
            while client.write_all(&chunk).await.is_ok() {}
        });
        let got = read_request(&mut server, 1 << 20, Instant::now() + LONG, LONG, &ticket).await;
        assert!(matches!(got, Err(ReadError::TooLarge)), "{got:?}");
        let err = got.unwrap_err();
        assert!(err.to_string().contains("limit of 4 MiB"), "{err}");
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        drop(server);
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn a_request_that_does_not_arrive_in_time_is_refused_saying_how_long() {
        let pending = Pending::new(4);
        let (ticket, _) = pending.register();
        let (mut client, mut server) = tokio::io::duplex(64);
        client.write_all(b"{\"command\":").await.unwrap();
        let timeout = Duration::from_secs(1);
        let got = read_request(&mut server, 1024, Instant::now() + timeout, timeout, &ticket).await;
        let err = got.unwrap_err();
        assert!(matches!(err, ReadError::TimedOut(_)), "{err:?}");
        assert!(err.to_string().contains("within 1 s"), "{err}");
        assert_eq!(err.cni_code(), ErrorCode::TryAgainLater);
    }

    #[tokio::test]
    async fn the_rest_of_a_refused_request_is_discarded_up_to_a_bound() {
        let pending = Pending::new(4);
        let (ticket, _) = pending.register();
        let (mut client, mut server) = tokio::io::duplex(1 << 10);
        let writer = tokio::spawn(async move {
            let mut sent = 0usize;
            while client.write_all(&[b'x'; 1 << 10]).await.is_ok() {
                sent += 1 << 10;
            }
            sent
        });
        discard_rest(&mut server, 64 << 10, Instant::now() + LONG, &ticket).await;
        drop(server);
        let sent = writer.await.unwrap();
        // What the writer got in: what was discarded, plus at most the pipe's buffer.
        assert!((64 << 10..=66 << 10).contains(&sent), "{sent} bytes went in");
    }

    #[tokio::test]
    async fn an_evicted_connection_stops_waiting() {
        let pending = Pending::new(1);
        let (ticket, _) = pending.register();
        let (_client, mut server) = tokio::io::duplex(64);
        let _newer = pending.register();
        let got = read_request(&mut server, 1024, Instant::now() + LONG, LONG, &ticket).await;
        let err = got.unwrap_err();
        assert!(matches!(err, ReadError::Evicted(1)), "{err:?}");
        assert!(err.to_string().contains("more than 1 connections"), "{err}");
    }
}
