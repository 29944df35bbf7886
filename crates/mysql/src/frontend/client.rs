//! The client's connection: framing, buffers that are only held while a command is being
//! served (see `sluice_runtime::buffers`), and helpers to send OK/ERR/EOF packets in the form the client
//! negotiated.

use crate::wire::consts::cap;
use crate::wire::ok::{write_eof, write_err, write_ok, OkPacket};
use crate::wire::packet::{frame, read_packet, Packet, ReadError};
use bytes::BytesMut;
use sluice_runtime::buffers as spare;
use sluice_runtime::tls::ClientStream;
use tokio::net::TcpStream;

/// A client connection.
pub struct ClientConn {
    /// The socket (TLS once the client asked for it).
    pub stream: ClientStream,
    /// Read buffer.
    pub rbuf: BytesMut,
    /// Write scratch buffer.
    pub wbuf: Vec<u8>,
    /// Capabilities negotiated with the client.
    pub caps: u64,
    /// Largest request accepted.
    pub max_packet: usize,
}

impl ClientConn {
    /// Wraps a freshly accepted socket.
    pub fn new(stream: TcpStream, max_packet: usize) -> ClientConn {
        ClientConn {
            stream: ClientStream::Plain(stream),
            rbuf: spare::read_buffer(),
            wbuf: spare::write_buffer(),
            caps: 0,
            max_packet,
        }
    }

    /// True if the client negotiated `flag`.
    pub fn has(&self, flag: u64) -> bool {
        self.caps & flag != 0
    }

    /// Reads the next command. While the client is idle, no buffer is held: they go back to
    /// the shared shelf and a pair is taken when the client's next bytes arrive.
    pub async fn read_command(&mut self) -> Result<Packet, ReadError> {
        if self.rbuf.is_empty() {
            self.release_buffers();
            self.stream.readable().await?;
            self.take_buffers();
        }
        read_packet(&mut self.stream, &mut self.rbuf, self.max_packet).await
    }

    /// Takes a pair of buffers from the shared shelf as the client's bytes arrive (the write
    /// buffer only if none is held).
    pub fn take_buffers(&mut self) {
        self.rbuf = spare::read_buffer();
        if self.wbuf.capacity() == 0 {
            self.wbuf = spare::write_buffer();
        }
    }

    /// Gives the buffers back to the shared shelf (or frees them); one holding bytes not
    /// yet read or sent is kept.
    pub fn release_buffers(&mut self) {
        if self.rbuf.is_empty() {
            spare::give_read(std::mem::take(&mut self.rbuf));
        }
        if self.wbuf.is_empty() {
            spare::give_write(std::mem::take(&mut self.wbuf));
        }
    }

    /// Writes the scratch buffer to the client and clears it.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.wbuf.is_empty() {
            let r = self.stream.write_all_sent(&self.wbuf).await;
            self.wbuf.clear();
            r?;
        }
        Ok(())
    }

    /// Queues an ERR packet.
    pub fn push_err(&mut self, seq: u8, code: u16, sqlstate: &[u8; 5], message: &str) {
        write_err(&mut self.wbuf, seq, code, sqlstate, message);
    }

    /// Sends an ERR packet.
    pub async fn send_err(
        &mut self,
        seq: u8,
        code: u16,
        sqlstate: &[u8; 5],
        message: &str,
    ) -> std::io::Result<()> {
        self.push_err(seq, code, sqlstate, message);
        self.flush().await
    }

    /// Queues an OK packet (header 0x00).
    pub fn push_ok(&mut self, seq: u8, ok: &OkPacket<'_>) {
        let tracks = self.has(cap::SESSION_TRACK);
        write_ok(&mut self.wbuf, seq, ok, 0x00, tracks);
    }

    /// Sends an OK packet with the given status flags.
    pub async fn send_ok(&mut self, seq: u8, status: u16) -> std::io::Result<()> {
        self.push_ok(
            seq,
            &OkPacket {
                status,
                ..OkPacket::default()
            },
        );
        self.flush().await
    }

    /// Queues an EOF, or the OK that replaces it under CLIENT_DEPRECATE_EOF.
    pub fn push_eof(&mut self, seq: u8, warnings: u16, status: u16) {
        if self.has(cap::DEPRECATE_EOF) {
            let tracks = self.has(cap::SESSION_TRACK);
            let ok = OkPacket {
                status,
                warnings,
                ..OkPacket::default()
            };
            write_ok(&mut self.wbuf, seq, &ok, 0xfe, tracks);
        } else {
            write_eof(&mut self.wbuf, seq, warnings, status);
        }
    }

    /// Queues a raw payload as a packet.
    pub fn push_packet(&mut self, seq: u8, payload: &[u8]) -> u8 {
        frame(&mut self.wbuf, seq, payload)
    }
}

impl ClientConn {
    /// Writes bytes straight to the client.
    pub async fn stream_write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.stream.write_all_sent(bytes).await
    }
}

impl Drop for ClientConn {
    fn drop(&mut self) {
        self.release_buffers();
    }
}
