//! The HTTP connection of a provider request (spec `providers.md` §6.1, §6.6): ureq's
//! default chain (CONNECT proxy, TCP, rustls) with our TCP transport in place of
//! ureq's, so that a read of a streaming body also returns when the consumer's thread
//! is woken ([`super::wake::Wake`], once the request's [`ReadWake`] is armed: its head
//! may be read on another thread, [`super::head`]). The socket is registered with the
//! agent's shutdown (a cancel shuts it down, so a blocked read returns) as ureq's own
//! TCP connector does. A proxy connection goes through the same chain, so it wakes too.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::{Arc, Weak};
use std::time::Duration;

use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, NextTimeout,
    RustlsConnector, ShutdownHandle, Transport,
};
use ureq::{Error, Timeout};

use super::wake::{Parked, ReadWake};

/// ureq's connector chain with a [`WakeTcpConnector`]: an agent whose streaming reads
/// return on `wake` once it is armed (none = plain blocking reads).
pub(crate) fn connector(wake: Option<Arc<ReadWake>>) -> impl Connector {
    ().chain(ConnectProxyConnector::default())
        .chain(WakeTcpConnector { wake })
        .chain(RustlsConnector::default())
}

/// Opens TCP connections whose reads a [`super::wake::Wake`] can end.
#[derive(Debug)]
pub(crate) struct WakeTcpConnector {
    wake: Option<Arc<ReadWake>>,
}

/// The socket, shared (weakly) with the agent's shutdown.
#[derive(Debug)]
struct Socket(TcpStream);

impl ShutdownHandle for Socket {
    fn shutdown(&self) {
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

impl<In: Transport> Connector<In> for WakeTcpConnector {
    type Out = Either<In, WakeTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, Error> {
        if let Some(t) = chained {
            // A proxy connection (itself made through this chain).
            return Ok(Some(Either::A(t)));
        }
        let stream = connect(details)?;
        let socket = Arc::new(Socket(stream));
        let weak: Weak<Socket> = Arc::downgrade(&socket);
        (details.register_shutdown)(weak)?;
        let config = details.config;
        Ok(Some(Either::B(WakeTransport {
            socket,
            buffers: ZeroedBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
            wake: self.wake.clone(),
            read_timeout: None,
            write_timeout: None,
        })))
    }
}

/// Tries the resolved addresses in order, sharing the connect timeout among those
/// left; the last error when none answers.
fn connect(details: &ConnectionDetails) -> Result<TcpStream, Error> {
    let started = std::time::Instant::now();
    let total = details.timeout.not_zero().map(|d| *d);
    let addrs: Vec<std::net::SocketAddr> = details.addrs.iter().copied().collect();
    let mut last = Error::Io(io::ErrorKind::ConnectionRefused.into());
    for (i, addr) in addrs.iter().enumerate() {
        let per_addr = total.map(|t| {
            let left = t.saturating_sub(started.elapsed());
            (left / (addrs.len() - i) as u32).max(Duration::from_millis(10))
        });
        let r = match per_addr {
            Some(t) => TcpStream::connect_timeout(addr, t),
            None => TcpStream::connect(addr),
        };
        match r {
            Ok(s) => {
                if details.config.no_delay() {
                    s.set_nodelay(true)?;
                }
                return Ok(s);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                last = Error::Timeout(Timeout::Connect)
            }
            Err(e) => last = Error::Io(e),
        }
    }
    Err(last)
}

/// A TCP connection whose reads of a streaming body return on a wake (once armed), as
/// `Err(Error::Io(WouldBlock))`, with the buffers untouched: the next read goes on
/// where this one stopped.
#[derive(Debug)]
pub(crate) struct WakeTransport {
    socket: Arc<Socket>,
    buffers: ZeroedBuffers,
    wake: Option<Arc<ReadWake>>,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

/// A connection's buffers as ureq's `LazyBuffers` keeps them (allocated at first use,
/// an input buffer read from its consumed end, an output buffer written from 0), but
/// allocated zeroed by the allocator (`calloc`: memory fresh from the system is not
/// written) instead of grown and zero-filled, so the pages of a buffer a short answer
/// never reaches are never touched.
#[derive(Debug)]
struct ZeroedBuffers {
    input_size: usize,
    output_size: usize,
    input: Vec<u8>,
    /// End of the bytes read into `input`.
    filled: usize,
    /// End of the bytes of `input` consumed.
    consumed: usize,
    output: Vec<u8>,
    /// The last consume took some bytes (the input left may be usable as is).
    progress: bool,
}

/// Free input space below which [`ZeroedBuffers::tmp_and_output`] grows the input
/// buffer (ureq's `LazyBuffers` figure): scratch space to read a request body into.
const MIN_TMP_SIZE: usize = 10 * 1024;

impl ZeroedBuffers {
    fn new(input_size: usize, output_size: usize) -> Self {
        ZeroedBuffers {
            input_size: input_size.max(1),
            output_size: output_size.max(1),
            input: Vec::new(),
            filled: 0,
            consumed: 0,
            output: Vec::new(),
            progress: false,
        }
    }

    fn ensure_allocation(&mut self) {
        if self.output.len() < self.output_size {
            self.output = vec![0; self.output_size];
        }
        self.grow_input(self.input_size);
    }

    /// Makes the input buffer at least `size` bytes, keeping what it holds.
    fn grow_input(&mut self, size: usize) {
        if self.input.is_empty() {
            self.input = vec![0; size];
        } else if self.input.len() < size {
            self.input.resize(size, 0);
        }
    }

    /// The free end of the input buffer, the unconsumed bytes first moved to its start
    /// when all were consumed or they fill more than half of it.
    fn free_input(&mut self) -> &mut [u8] {
        if self.consumed > 0 {
            if self.consumed == self.filled {
                (self.consumed, self.filled) = (0, 0);
            } else if self.filled > self.input.len() / 2 {
                self.input.copy_within(self.consumed..self.filled, 0);
                self.filled -= self.consumed;
                self.consumed = 0;
            }
        }
        self.input.get_mut(self.filled..).unwrap_or_default()
    }
}

impl Buffers for ZeroedBuffers {
    fn output(&mut self) -> &mut [u8] {
        self.ensure_allocation();
        &mut self.output
    }

    fn input(&self) -> &[u8] {
        self.input
            .get(self.consumed..self.filled)
            .unwrap_or_default()
    }

    fn input_append_buf(&mut self) -> &mut [u8] {
        self.ensure_allocation();
        self.free_input()
    }

    fn input_appended(&mut self, amount: usize) {
        self.filled = (self.filled + amount).min(self.input.len());
    }

    fn input_consume(&mut self, amount: usize) {
        self.progress = amount > 0;
        self.consumed = (self.consumed + amount).min(self.filled);
    }

    fn tmp_and_output(&mut self) -> (&mut [u8], &mut [u8]) {
        self.ensure_allocation();
        if self.free_input().len() < MIN_TMP_SIZE {
            self.grow_input(self.filled + MIN_TMP_SIZE);
        }
        let filled = self.filled.min(self.input.len());
        let (_, free) = self.input.split_at_mut(filled);
        (free, &mut self.output)
    }

    fn can_use_input(&self) -> bool {
        self.filled > self.consumed && self.progress
    }
}

/// Sets a socket timeout when it changed since the last call.
fn update(
    cached: &mut Option<Duration>,
    want: Option<Duration>,
    set: impl FnOnce(Option<Duration>) -> io::Result<()>,
) -> io::Result<()> {
    if *cached != want {
        set(want)?;
        *cached = want;
    }
    Ok(())
}

impl Transport for WakeTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = timeout.for_write();
        if timeout.after.is_zero() {
            return Err(Error::Timeout(timeout.reason));
        }
        let stream = &self.socket.0;
        update(
            &mut self.write_timeout,
            timeout.not_zero().map(|d| *d),
            |t| stream.set_write_timeout(t),
        )?;
        let output = self.buffers.output().get(..amount).unwrap_or_default();
        match (&self.socket.0).write_all(output) {
            Ok(()) => Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                Err(Error::Timeout(timeout.reason))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        if timeout.after.is_zero() {
            return Err(Error::Timeout(timeout.reason));
        }
        let limit = timeout.not_zero().map(|d| *d);
        if let Some(wake) = self.wake.as_ref().and_then(|w| w.armed()) {
            // What is already there is read at once; otherwise wait for the socket
            // and the wake together.
            let input = self.buffers.input_append_buf();
            let amount = loop {
                let sock = self.socket.0.as_fd();
                match rustix::net::recv(sock, &mut *input, rustix::net::RecvFlags::DONTWAIT) {
                    Ok((n, _)) => break n,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(rustix::io::Errno::AGAIN) => {}
                    Err(e) => return Err(Error::Io(e.into())),
                }
                match wake.park(Some(sock), limit)? {
                    Parked::Readable => {}
                    Parked::Woken => return Err(Error::Io(io::ErrorKind::WouldBlock.into())),
                    Parked::TimedOut => return Err(Error::Timeout(timeout.reason)),
                }
            };
            self.buffers.input_appended(amount);
            return Ok(amount > 0);
        }
        let stream = &self.socket.0;
        update(&mut self.read_timeout, limit, |t| {
            stream.set_read_timeout(t)
        })?;
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match (&self.socket.0).read(input) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                    ) =>
                {
                    return Err(Error::Timeout(timeout.reason))
                }
                Err(e) => return Err(e.into()),
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // Connections are not pooled (`max_idle_connections(0)`): a socket is never
        // reused, so only whether it is still connected matters.
        self.socket.0.peer_addr().is_ok()
    }
}

/// Test servers' side of a request: reads its head and its `content-length` body from
/// `r`; returns the body.
#[cfg(test)]
pub(crate) fn read_request(r: &mut impl io::BufRead) -> Vec<u8> {
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderConfig;
    use crate::provider::chat::{ChatRequest, StreamEvent};
    use crate::provider::wire::WireProtocol;
    use crate::provider::{CancelToken, HttpProvider, Provider, StreamSink, Wake};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    fn chat_delta(text: &str) -> String {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n")
    }

    /// Records the text and how many flushes came while the server held the stream.
    struct Recorder {
        text: String,
        done: bool,
        holding: Arc<AtomicBool>,
        flushes_while_held: usize,
    }

    impl StreamSink for Recorder {
        fn event(&mut self, ev: StreamEvent) -> bool {
            match ev {
                StreamEvent::TextDelta { text } => self.text.push_str(&text),
                StreamEvent::Done { .. } => self.done = true,
                StreamEvent::Failed { error } => panic!("failed: {error:?}"),
                _ => {}
            }
            true
        }
        fn flush(&mut self) -> bool {
            if self.holding.load(Ordering::SeqCst) {
                self.flushes_while_held += 1;
            }
            true
        }
    }

    /// A server that sends the head and a first piece of the stream (ending inside an
    /// event), holds, then sends the rest in one chunked body.
    fn serve(listener: TcpListener, holding: Arc<AtomicBool>, hold: Duration) {
        let (mut s, _) = listener.accept().unwrap();
        read_request(&mut io::BufReader::new(s.try_clone().unwrap()));
        let chunk = |s: &mut TcpStream, text: &str| {
            write!(s, "{:x}\r\n{text}\r\n", text.len()).unwrap();
            s.flush().unwrap();
        };
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .unwrap();
        let c = chat_delta("C");
        let (c1, c2) = c.split_at(25);
        chunk(
            &mut s,
            &format!("{}{}{c1}", chat_delta("A"), chat_delta("B")),
        );
        holding.store(true, Ordering::SeqCst);
        std::thread::sleep(hold);
        holding.store(false, Ordering::SeqCst);
        let end = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        chunk(&mut s, &format!("{c2}{}{end}", chat_delta("D")));
        // The client may hang up as soon as it read `[DONE]`.
        let _ = s.write_all(b"0\r\n\r\n");
    }

    /// The same operations on our buffers and on ureq's `LazyBuffers` leave the same
    /// unconsumed input (a request body's scratch use, then pseudo-random reads and
    /// consumes).
    #[test]
    fn zeroed_buffers_hold_what_ureqs_buffers_hold() {
        use ureq::unversioned::transport::LazyBuffers;
        let (mut ours, mut theirs) = (ZeroedBuffers::new(4096, 1024), LazyBuffers::new(4096, 1024));
        let mut seed = 0x2545_f491_u64;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize % n
        };
        let mut byte = 0u8;
        // A request's body goes through the scratch space first, then the answer is read.
        for _ in 0..3 {
            let ((t1, o1), (_, o2)) = (ours.tmp_and_output(), theirs.tmp_and_output());
            assert!(t1.len() >= MIN_TMP_SIZE);
            assert_eq!(o1.len(), o2.len());
        }
        for step in 0..5000 {
            match next(4) {
                0 | 1 => {
                    let (a, b) = (ours.input_append_buf(), theirs.input_append_buf());
                    let n = next(a.len().min(b.len()) + 1);
                    for i in 0..n {
                        byte = byte.wrapping_add(1);
                        a[i] = byte;
                        b[i] = byte;
                    }
                    ours.input_appended(n);
                    theirs.input_appended(n);
                }
                _ => {
                    let n = next(ours.input().len() + 1);
                    ours.input_consume(n);
                    theirs.input_consume(n);
                }
            }
            assert_eq!(ours.input(), theirs.input(), "step {step}");
            assert_eq!(ours.can_use_input(), theirs.can_use_input(), "step {step}");
            assert_eq!(ours.output().len(), theirs.output().len());
        }
    }

    #[test]
    fn a_wake_mid_stream_loses_and_repeats_no_byte() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let holding = Arc::new(AtomicBool::new(false));
        let hold = Duration::from_millis(1500);
        let h = holding.clone();
        let server = std::thread::spawn(move || serve(listener, h, hold));
        let cfg = ProviderConfig {
            provider_type: "openai-compatible".into(),
            base_url: url,
            ..Default::default()
        };
        let p = HttpProvider::from_config("p", WireProtocol::OpenAiChat, &cfg).unwrap();
        let wake = Arc::new(Wake::new());
        let token = CancelToken::new();
        token.set_wake(wake.clone());
        // Wakes the reader three times while the server holds the stream.
        let (w, h) = (wake.clone(), holding.clone());
        let waker = std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(10);
            while !h.load(Ordering::SeqCst) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            for _ in 0..3 {
                std::thread::sleep(Duration::from_millis(200));
                w.signal();
            }
        });
        let mut sink = Recorder {
            text: String::new(),
            done: false,
            holding: holding.clone(),
            flushes_while_held: 0,
        };
        let req = ChatRequest {
            model: "m".into(),
            ..Default::default()
        };
        p.stream_with_cancel(&req, &token, &mut sink);
        server.join().unwrap();
        waker.join().unwrap();
        assert_eq!(sink.text, "ABCD");
        assert!(sink.done);
        // One flush before the read that waits, one per wake.
        assert!(sink.flushes_while_held >= 3, "{}", sink.flushes_while_held);
        assert!(!wake.listening());
    }

    /// The SSE data of a TLS stream that `openssl s_server` sends from its stdin: a
    /// first piece ending inside an event, then (after the reader was woken three
    /// times) the rest. Not run (said on stderr) when no `openssl` command is installed.
    #[test]
    fn a_wake_mid_tls_stream_loses_and_repeats_no_byte() {
        use std::process::{Command, Stdio};
        let dir = std::env::temp_dir().join(format!("wuu-wake-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let made = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-subj",
                "/CN=localhost",
                "-keyout",
                "k.pem",
                "-out",
                "c.pem",
            ])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("no openssl command: the TLS case is not run");
            return;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = Command::new("openssl")
            .args(["s_server", "-quiet", "-cert", "c.pem", "-key", "k.pem"])
            .args(["-accept", &format!("127.0.0.1:{port}")])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut feed = server.stdin.take().unwrap();
        let c = chat_delta("C");
        let (c1, c2) = c.split_at(25);
        let first = format!("{}{}{c1}", chat_delta("A"), chat_delta("B"));
        let rest = format!("{c2}{}", chat_delta("D"));
        let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
        write!(
            feed,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{}",
            chunk(&first)
        )
        .unwrap();
        feed.flush().unwrap();
        let config = ureq::Agent::config_builder()
            .tls_config(
                ureq::tls::TlsConfig::builder()
                    .disable_verification(true)
                    .build(),
            )
            .timeout_per_read(Some(Duration::from_secs(20)))
            .proxy(None)
            .build();
        let wake = Arc::new(Wake::new());
        let read_wake = Arc::new(ReadWake::new(wake.clone()));
        let agent = ureq::Agent::with_parts(
            config,
            connector(Some(read_wake.clone())),
            ureq::unversioned::resolver::DefaultResolver::default(),
        );
        let url = format!("https://127.0.0.1:{port}/v1/chat/completions");
        let end = Instant::now() + Duration::from_secs(10);
        let resp = loop {
            match agent.post(&url).send(&b"{}"[..]) {
                Ok(r) => break r,
                Err(e) if Instant::now() < end => {
                    log::debug!("s_server not up yet: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("{e}"),
            }
        };
        read_wake.arm();
        let mut sse = crate::provider::sse::SseReader::new(io::BufReader::new(
            resp.into_body().into_reader(),
        ));
        let mut data = String::new();
        let (mut wakes, mut signalled) = (0, 0);
        loop {
            match sse.next_event_ref() {
                Ok(Some(ev)) => data.push_str(&ev.data),
                Ok(None) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wakes += 1;
                    if wakes == 3 {
                        // Woken three times while the server held: now the rest.
                        write!(feed, "{}0\r\n\r\n", chunk(&rest)).unwrap();
                        feed.flush().unwrap();
                    }
                }
                Err(e) => panic!("{e}"),
            }
            if data.contains("\"B\"") && signalled < 3 && wakes == signalled {
                signalled += 1;
                let w = wake.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(100));
                    w.signal();
                });
            }
        }
        let _ = server.kill();
        let _ = server.wait();
        let _ = std::fs::remove_dir_all(&dir);
        let texts: Vec<&str> = ["A", "B", "C", "D"]
            .iter()
            .filter(|t| data.contains(&format!("\"content\":\"{t}\"")))
            .copied()
            .collect();
        assert_eq!(texts, ["A", "B", "C", "D"], "{data}");
        assert_eq!(data.matches("content").count(), 4, "{data}");
        assert_eq!(wakes, 3);
    }
}
