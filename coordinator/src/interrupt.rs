//! Stopping with SIGINT or SIGTERM: what a stopped process says and leaves.
//!
//! [`install`] (at the start of `main`) starts a thread that waits for either signal. When one
//! comes, it runs the hooks registered with [`on_stop`], newest first, and exits with status
//! 128 + the signal's number (130, 143), as a shell reports a process ended by it. What a
//! runtime must not leave behind or must say registers a hook for as long as it runs (the
//! returned [`Hook`] removes it when dropped): `serve` prints where its checkpoint is and how to
//! resume and export; `demo` ends its edge-client processes. Nothing is lost by exiting there:
//! checkpoints and models are written atomically after every round, so the files on disk are
//! those of the last completed round.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::warn;

type Action = Box<dyn FnOnce(&'static str) + Send>;

/// Hooks to run on a stop, by id.
struct Hooks {
    list: Mutex<Vec<(u64, Action)>>,
    next: AtomicU64,
}

impl Hooks {
    const fn new() -> Self {
        Hooks {
            list: Mutex::new(Vec::new()),
            next: AtomicU64::new(0),
        }
    }

    fn add(&'static self, action: Action) -> Hook {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, action));
        Hook { hooks: self, id }
    }

    /// Runs the hooks, newest first, for the signal `name`; each runs once.
    fn run(&self, name: &'static str) {
        let list = std::mem::take(&mut *self.list.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, action) in list.into_iter().rev() {
            action(name);
        }
    }
}

/// The process's hooks.
static HOOKS: Hooks = Hooks::new();

/// A hook registered by [`on_stop`]; dropping it unregisters it.
#[must_use = "the hook is removed when this is dropped"]
pub struct Hook {
    hooks: &'static Hooks,
    id: u64,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook").field("id", &self.id).finish()
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        self.hooks
            .list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _)| *id != self.id);
    }
}

/// Runs `action` with the signal's name (`SIGINT`, `SIGTERM`) if the process is stopped by one
/// while the returned [`Hook`] lives.
pub fn on_stop(action: impl FnOnce(&'static str) + Send + 'static) -> Hook {
    HOOKS.add(Box::new(action))
}

/// Starts the thread that turns SIGINT and SIGTERM into [`on_stop`]'s hooks and an exit. Without
/// it (a failure to set it up is logged), the signals end the process as they do by default.
pub fn install() {
    let started = std::thread::Builder::new()
        .name("signals".into())
        .spawn(|| {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            {
                Ok(r) => r,
                Err(e) => return warn!("cannot watch for SIGINT/SIGTERM: {e}"),
            };
            let code = runtime.block_on(async {
                use tokio::signal::unix::{SignalKind, signal};
                let (mut int, mut term) = match (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                ) {
                    (Ok(i), Ok(t)) => (i, t),
                    (Err(e), _) | (_, Err(e)) => {
                        warn!("cannot watch for SIGINT/SIGTERM: {e}");
                        return None;
                    }
                };
                tokio::select! {
                    _ = int.recv() => Some(("SIGINT", 130)),
                    _ = term.recv() => Some(("SIGTERM", 143)),
                }
            });
            if let Some((name, code)) = code {
                HOOKS.run(name);
                std::process::exit(code);
            }
        });
    if let Err(e) = started {
        warn!("cannot watch for SIGINT/SIGTERM: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Hooks run newest first, each once; a dropped hook does not run.
    #[test]
    fn hooks_run_newest_first_and_dropped_ones_not() {
        let hooks: &'static Hooks = Box::leak(Box::new(Hooks::new()));
        let order = Arc::new(Mutex::new(Vec::new()));
        let push = |n: usize| {
            let order = order.clone();
            hooks.add(Box::new(move |signal| {
                assert_eq!(signal, "SIGTERM");
                order.lock().unwrap().push(n);
            }))
        };
        let _first = push(1);
        let dropped = push(2);
        let _third = push(3);
        drop(dropped);
        hooks.run("SIGTERM");
        hooks.run("SIGTERM");
        assert_eq!(*order.lock().unwrap(), [3, 1]);
    }
}
