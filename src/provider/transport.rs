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
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
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
            buffers: LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
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
    buffers: LazyBuffers,
    wake: Option<Arc<ReadWake>>,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderConfig;
    use crate::provider::chat::{ChatRequest, StreamEvent};
    use crate::provider::wire::WireProtocol;
    use crate::provider::{CancelToken, HttpProvider, Provider, StreamSink, Wake};
    use std::io::BufRead;
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
        let mut r = io::BufReader::new(s.try_clone().unwrap());
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
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
