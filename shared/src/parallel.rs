//! Work spread over the cores: one item per thread, each thread taking the next item when it is
//! free, the results in the items' order (so they do not depend on the number of threads when
//! each item's result does not).

/// The cores this process may use (1 when the system cannot tell).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Maps `f` over `items` on all cores ([`cores`]). Keeps the order of `items`.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    par_map_on(cores(), items, f)
}

/// `par_map` (one item per thread) on at most `threads` threads, each taking the next item when
/// it is free.
///
/// # Panics
///
/// When `f` panics.
pub fn par_map_on<T: Sync, R: Send>(
    threads: usize,
    items: &[T],
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        mine.push((i, f(item)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker thread panicked"))
            .collect()
    });
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn par_map_on_keeps_every_item_in_order_on_any_number_of_threads() {
        let items: Vec<u64> = (0..37).collect();
        let want: Vec<u64> = items.iter().map(|x| x * x + 1).collect();
        for threads in [0, 1, 2, 3, 8, 64] {
            assert_eq!(
                par_map_on(threads, &items, |x| x * x + 1),
                want,
                "{threads} threads"
            );
        }
        assert!(par_map_on(4, &[] as &[u64], |x| *x).is_empty());
    }

    #[test]
    fn par_map_on_uses_several_threads() {
        // Item 0 waits for a message that item 1 sends: on one thread it would time out.
        let (tx, rx) = std::sync::mpsc::channel();
        let rx = std::sync::Mutex::new(rx);
        let answered = par_map_on(2, &[0, 1], |&i| {
            if i == 0 {
                rx.lock()
                    .map(|rx| rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok())
                    .unwrap_or(false)
            } else {
                tx.send(()).is_ok()
            }
        });
        assert_eq!(answered, [true, true]);
    }
}
