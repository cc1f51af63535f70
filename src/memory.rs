//! Where short-lived allocations go: the polls of every watch (its lists, the full objects read
//! before they are reduced to views) and of every reconcile (its requests, responses and
//! rebuilt objects) allocate in a jemalloc arena of their own.
//!
//! What a member keeps for its life (its connection, buffers, tasks, the views' stores) is
//! allocated in its first seconds, beside the many more bytes its first lists and reconciles
//! allocate and free. Mixed in the same slabs, each long-lived object that stays keeps its
//! slab held: at 200 members × 10 exports the allocator held 71.0 MiB for 54.3 MiB of live
//! objects. With the short-lived ones apart: 66.9 MiB for 55.4 MiB, 322.8 → 295.1 KiB RSS per
//! member (docs/benchmarks.md, memory). A view's store keeps a copy of what the watch read (kube's reflector
//! clones each object it keeps), and that copy is made outside the scratch polls.
//!
//! Only the binary turns this on ([`keep_scratch_apart`]), with jemalloc as its allocator;
//! elsewhere (tests, other allocators) polls run as they are.

use std::future::Future;
use std::sync::OnceLock;

use futures::Stream;

/// `thread.arena` as a MIB, and the scratch arena.
static SCRATCH: OnceLock<([usize; 2], u32)> = OnceLock::new();

/// Creates the scratch arena. Call once, before any member starts; the process's allocator must
/// be jemalloc (the one `tikv_jemalloc_ctl` talks to).
pub fn keep_scratch_apart() -> Result<u32, tikv_jemalloc_ctl::Error> {
    let mut mib = [0usize; 2];
    tikv_jemalloc_ctl::raw::name_to_mib(b"thread.arena\0", &mut mib)?;
    // SAFETY: `arenas.create` is read as an unsigned int.
    let arena: u32 = unsafe { tikv_jemalloc_ctl::raw::read(b"arenas.create\0") }?;
    let _ = SCRATCH.set((mib, arena));
    Ok(arena)
}

/// Runs `f` with this thread's allocations made in the scratch arena (frees go to whatever
/// arena each object came from, as always); the thread's own arena is back after it, panic or
/// not.
fn in_scratch<T>(f: impl FnOnce() -> T) -> T {
    let Some((mib, arena)) = SCRATCH.get() else {
        return f();
    };
    // SAFETY: `thread.arena` is an unsigned int, read and written through its MIB.
    let Ok(previous) = (unsafe { tikv_jemalloc_ctl::raw::update_mib(mib, *arena) }) else {
        return f();
    };
    struct Restore<'a>(&'a [usize; 2], u32);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            // SAFETY: as above; arenas are never destroyed, the one read before is there.
            let _ = unsafe { tikv_jemalloc_ctl::raw::write_mib(self.0, self.1) };
        }
    }
    let _restore = Restore(mib, previous);
    f()
}

/// `stream`, each poll of it allocating in the scratch arena.
pub(crate) fn scratch_stream<S>(stream: S) -> impl Stream<Item = S::Item> + Send + 'static
where
    S: Stream + Send + 'static,
{
    let mut stream = Box::pin(stream);
    futures::stream::poll_fn(move |cx| in_scratch(|| stream.as_mut().poll_next(cx)))
}

/// `future`, itself and each poll of it allocated in the scratch arena.
pub(crate) fn scratch_future<F>(future: F) -> impl Future<Output = F::Output> + Send + 'static
where
    F: Future + Send + 'static,
{
    let mut future = in_scratch(|| Box::pin(future));
    futures::future::poll_fn(move |cx| in_scratch(|| future.as_mut().poll(cx)))
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    use tikv_jemalloc_ctl::raw::read;

    use super::*;

    fn large_bytes_of(arena: u32) -> usize {
        tikv_jemalloc_ctl::epoch::advance().expect("epoch");
        let name = format!("stats.arenas.{arena}.large.allocated\0");
        // SAFETY: a size_t statistic.
        unsafe { read(name.as_bytes()) }.expect("large.allocated")
    }

    fn thread_arena() -> u32 {
        // SAFETY: an unsigned int.
        unsafe { read(b"thread.arena\0") }.expect("thread.arena")
    }

    // jemalloc is linked beside the test binary's own allocator: its arenas are reached
    // through its own functions.
    #[test]
    fn a_scratch_poll_allocates_in_the_scratch_arena_and_gives_the_thread_its_own_back() {
        keep_scratch_apart().expect("arena");
        let arena = SCRATCH.get().expect("set").1;
        let own = thread_arena();
        assert_ne!(own, arena);
        let before = large_bytes_of(arena);
        // Large: beyond any thread cache, so it is taken from the thread's arena at once.
        let layout = Layout::from_size_align(1 << 20, 8).expect("layout");
        let block = futures::executor::block_on(scratch_future(async move {
            assert_eq!(thread_arena(), arena);
            // SAFETY: a non-zero layout, freed below with the same.
            unsafe { tikv_jemallocator::Jemalloc.alloc(layout) as usize }
        }));
        assert_ne!(block, 0);
        assert_eq!(thread_arena(), own);
        assert!(large_bytes_of(arena) >= before + (1 << 20));
        // SAFETY: allocated above with this layout.
        unsafe { tikv_jemallocator::Jemalloc.dealloc(block as *mut u8, layout) };
        assert!(
            large_bytes_of(arena) < before + (1 << 20),
            "freed where it came from"
        );

        let panicked = std::panic::catch_unwind(|| in_scratch(|| panic!("inside")));
        assert!(panicked.is_err());
        assert_eq!(
            thread_arena(),
            own,
            "a panic inside gives the thread its arena back"
        );
    }
}
