//! The process's memory allocator: jemalloc, with transparent huge pages for
//! its arenas. Keyed state in memory is millions of small entries reached
//! at random; on 4 KiB pages nearly every lookup also misses the TLB, and
//! huge pages cut a point read of the in-memory backend by about a third
//! (`bench state-memory-5m`).

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's compile-time options, read when it starts.
#[repr(transparent)]
pub struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a `'static` string that is never written.
unsafe impl Sync for MallocConf {}

/// The options: huge pages for the arenas and, where it pays, for
/// jemalloc's own metadata.
// SAFETY: jemalloc (built with the `_rjem_` symbol prefix) reads this
// symbol as a NUL-terminated C string; nothing else defines it.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: MallocConf = MallocConf(c"thp:always,metadata_thp:auto".as_ptr());
