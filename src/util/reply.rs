//! One-shot replies: a request handed to another thread and answered once (a session's
//! answer to the router, an engine's answer to a step, an RPC peer's response). Every
//! reply type travels through the SAME channel type, a capacity-1 crossbeam channel of
//! `Box<dyn Any + Send>`, so the channel code (each flavour's send, receive, wake-up and
//! drop) is compiled once instead of once per reply type; the typed ends only box and
//! unbox. Not for streams (one allocation per reply): events keep their typed channels.
//!
//! The semantics are the channel's: `send` fails once the receiver is dropped, `recv`
//! fails once every sender is dropped with no reply sent.

use crossbeam_channel::{
    Receiver, RecvError, RecvTimeoutError, SendError, Sender, TryRecvError, TrySendError,
};
use std::any::Any;
use std::marker::PhantomData;
use std::time::Duration;

/// What the shared channel carries.
pub type Boxed = Box<dyn Any + Send>;

/// The sending end of a reply of type `T`.
pub struct ReplyTx<T> {
    tx: Sender<Boxed>,
    _t: PhantomData<fn(T)>,
}

/// The receiving end of a reply of type `T`.
pub struct ReplyRx<T> {
    rx: Receiver<Boxed>,
    _t: PhantomData<fn() -> T>,
}

/// A reply slot: one value of type `T` sent once, received once.
pub fn reply<T: Send + 'static>() -> (ReplyTx<T>, ReplyRx<T>) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    (
        ReplyTx {
            tx,
            _t: PhantomData,
        },
        ReplyRx {
            rx,
            _t: PhantomData,
        },
    )
}

impl<T> Clone for ReplyTx<T> {
    fn clone(&self) -> Self {
        ReplyTx {
            tx: self.tx.clone(),
            _t: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for ReplyTx<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplyTx")
    }
}

impl<T> std::fmt::Debug for ReplyRx<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplyRx")
    }
}

impl<T: Send + 'static> ReplyTx<T> {
    /// Sends the reply, blocking while an earlier reply waits unreceived; `Err` with the
    /// value when the receiver is gone.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        self.tx
            .send(Box::new(value))
            .map_err(|SendError(b)| SendError(unbox::<T>(b).expect("the value just boxed")))
    }

    /// Sends the reply unless the slot is full or the receiver is gone.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        self.tx.try_send(Box::new(value)).map_err(|e| match e {
            TrySendError::Full(b) => {
                TrySendError::Full(unbox::<T>(b).expect("the value just boxed"))
            }
            TrySendError::Disconnected(b) => {
                TrySendError::Disconnected(unbox::<T>(b).expect("the value just boxed"))
            }
        })
    }
}

impl<T: 'static> ReplyRx<T> {
    /// Waits for the reply; `Err` once every sender is gone with none sent.
    pub fn recv(&self) -> Result<T, RecvError> {
        unbox(self.rx.recv()?).ok_or(RecvError)
    }

    /// Waits at most `timeout` for the reply.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        unbox(self.rx.recv_timeout(timeout)?).ok_or(RecvTimeoutError::Disconnected)
    }

    /// The reply if it has come.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        unbox(self.rx.try_recv()?).ok_or(TryRecvError::Disconnected)
    }

    /// The untyped receiver, for `crossbeam_channel::select!`; open what it yields with
    /// [`ReplyRx::open`].
    pub fn receiver(&self) -> &Receiver<Boxed> {
        &self.rx
    }

    /// The reply out of what [`ReplyRx::receiver`] yielded.
    pub fn open(boxed: Boxed) -> Result<T, RecvError> {
        unbox(boxed).ok_or(RecvError)
    }
}

/// The value of a box sent by a `ReplyTx<T>` (always a `T`: only its typed end sends;
/// `None` would be a bug, answered as a disconnected channel rather than a panic).
fn unbox<T: 'static>(b: Boxed) -> Option<T> {
    b.downcast::<T>().ok().map(|b| *b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_received_once_and_a_dropped_end_is_seen() {
        let (tx, rx) = reply::<Result<String, u32>>();
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        tx.send(Ok("done".into())).unwrap();
        assert!(matches!(
            tx.try_send(Err(1)),
            Err(TrySendError::Full(Err(1)))
        ));
        assert_eq!(rx.recv().unwrap(), Ok("done".to_owned()));
        drop(tx);
        assert!(rx.recv().is_err());
        assert!(matches!(
            rx.recv_timeout(Duration::from_millis(1)),
            Err(RecvTimeoutError::Disconnected)
        ));

        let (tx, rx) = reply::<Vec<u8>>();
        drop(rx);
        assert_eq!(tx.send(vec![7]).unwrap_err().into_inner(), vec![7]);
    }

    #[test]
    fn a_reply_arrives_across_threads_and_through_select() {
        let (tx, rx) = reply::<u64>();
        let t = std::thread::spawn(move || tx.send(42).unwrap());
        let got = crossbeam_channel::select! {
            recv(rx.receiver()) -> m => m.map_err(|_| RecvError).and_then(ReplyRx::<u64>::open),
        };
        assert_eq!(got, Ok(42));
        t.join().unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(1)).is_err());
    }
}
