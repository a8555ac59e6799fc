//! A plugin's stdout and stderr, captured in memory and handed to the
//! host's log with the operator's name after each call. A plugin writing
//! more than the capacity between two calls loses the rest (counted in the
//! log line), never its call.

use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Bytes a stream keeps between two calls.
const CAPACITY: usize = 64 * 1024;

#[derive(Default)]
struct Buffer {
    bytes: Vec<u8>,
    dropped: usize,
}

/// One captured stream; clones share the buffer.
#[derive(Clone, Default)]
pub struct CapturedOutput {
    buffer: Arc<Mutex<Buffer>>,
}

impl CapturedOutput {
    fn push(&self, bytes: &[u8]) {
        let mut b = self.buffer.lock().expect("output lock");
        let room = CAPACITY.saturating_sub(b.bytes.len());
        let kept = bytes.len().min(room);
        b.bytes.extend_from_slice(&bytes[..kept]);
        b.dropped += bytes.len() - kept;
    }

    /// What was written since the last call, as lines, and the bytes lost
    /// past the capacity.
    pub fn take(&self) -> (Vec<String>, usize) {
        let mut b = self.buffer.lock().expect("output lock");
        let text = String::from_utf8_lossy(&b.bytes).into_owned();
        b.bytes.clear();
        let dropped = std::mem::take(&mut b.dropped);
        let lines = text
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        (lines, dropped)
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always room: what does not fit is dropped and counted.
        Ok(CAPACITY)
    }
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_lines_once_and_counts_what_did_not_fit() {
        let out = CapturedOutput::default();
        out.push(b"one\ntwo\n");
        assert_eq!(out.take(), (vec!["one".to_owned(), "two".to_owned()], 0));
        assert_eq!(out.take(), (Vec::new(), 0));
        out.push(&vec![b'x'; CAPACITY + 10]);
        let (lines, dropped) = out.take();
        assert_eq!((lines[0].len(), dropped), (CAPACITY, 10));
    }
}
