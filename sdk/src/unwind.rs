//! Catching panics inside futures, so a panicking handler becomes an error
//! reply instead of unwinding through the actor.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{codes, Error};

/// Wraps a future; a panic while polling it resolves to `Err(PANIC)`.
pub(crate) struct CatchUnwind<F>(pub Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(payload) => Poll::Ready(Err(panic_error(payload.as_ref()))),
        }
    }
}

/// Catches panics of `fut`.
pub(crate) fn catch<F: Future>(fut: F) -> CatchUnwind<F> {
    CatchUnwind(Box::pin(fut))
}

/// Turns a panic payload into an error.
pub(crate) fn panic_error(payload: &(dyn Any + Send)) -> Error {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    Error::new(codes::PANIC, format!("plugin code panicked: {text}"))
}
