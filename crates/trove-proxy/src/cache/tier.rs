//! Lower tiers (the disk) as the driver reaches them, through the storage interface only:
//! the flow asks to open the key's object where it lies in the tier's file
//! ([`open_file`], for a `sendfile` hit) or to promote it into memory ([`promote`]). Both
//! use the [`Lower`] handle the store's probe gave, whose blocking calls run on the
//! blocking pool here (the cache core never does I/O; trove-store schedules nothing).

use std::sync::Arc;

use trove_store::{FileBody, FileOpen, Lower, Object};

use super::Ctx;

/// The key's object where it lies in the lower tier's file, with a body of at least
/// `[cache.disk] sendfile_min` bytes: its head as an object whose body (of the right length)
/// is never read, and the file body to send instead. A record verified earlier whose head
/// is in the page cache is opened here, without the hop to the blocking pool; anything
/// else is opened (and verified) there. The handle comes back (`None` only if the blocking
/// task opening it panicked, and the handle with it).
pub(super) async fn open_file(
    cx: &Ctx<'_>,
    lower: Box<dyn Lower>,
) -> (
    Option<Box<dyn Lower>>,
    Option<(Arc<Object>, Box<dyn FileBody>)>,
) {
    let Some(min) = cx
        .shared
        .settings
        .cache
        .disk
        .as_ref()
        .map(|d| d.sendfile_min)
    else {
        return (Some(lower), None);
    };
    let traced = cx.shared.trace.enabled();
    let store = Arc::clone(&cx.shared.store);
    // Where the writer was when the disk was read, here or on the blocking pool: noted as
    // the read looks at the tier's index (between two of the writer's steps), or before
    // it when the read never got that far.
    let progress = move || traced.then(|| store.lower_progress()).flatten();
    let mut now = None;
    let opened = {
        let mut note = || now = progress();
        lower.open_file_now(min, traced.then_some(&mut note as &mut dyn FnMut()))
    };
    let now = now.or_else(&progress);
    let (lower, found) = match opened {
        FileOpen::Found(found) => {
            crate::trace::note_lower_read(now);
            (Some(lower), Some(*found))
        }
        FileOpen::No => {
            crate::trace::note_lower_read(now);
            (Some(lower), None)
        }
        FileOpen::WouldBlock => {
            let opened = tokio::task::spawn_blocking(move || {
                let mut at = None;
                let found = {
                    let mut note = || at = progress();
                    lower.open_file(min, traced.then_some(&mut note as &mut dyn FnMut()))
                };
                (lower, found, at.or_else(&progress))
            })
            .await;
            match opened {
                Ok((lower, found, at)) => {
                    crate::trace::note_lower_read(at);
                    (Some(lower), found)
                }
                Err(_) => (None, None),
            }
        }
    };
    let found = found.map(|hit| hit.into_object(cx.key()));
    (lower, found)
}

/// Loads the key from the lower tier into memory, verified, on the blocking pool
/// (`Lower::load`), so the lookup that follows finds it like any stored object. A large
/// body is inserted at once and filled from disk behind it, on the blocking pool too,
/// clients following it as it is read.
/// When `traced`, notes where the lower tier's writer was as the load began
/// ([`crate::trace::note_lower_read`]).
pub(super) async fn promote(cx: &Ctx<'_>, lower: Option<Box<dyn Lower>>) {
    let Some(lower) = lower else { return };
    let traced = cx.shared.trace.enabled();
    let store = Arc::clone(&cx.shared.store);
    let loaded = tokio::task::spawn_blocking(move || {
        // Noted as the load looks at the tier's index (see `open_file`).
        let progress = || traced.then(|| store.lower_progress()).flatten();
        let mut at = None;
        let fills = {
            let mut note = || at = progress();
            lower.load(traced.then_some(&mut note as &mut dyn FnMut()))
        };
        (fills, at.or_else(progress))
    })
    .await;
    let Ok((fills, at)) = loaded else {
        return;
    };
    crate::trace::note_lower_read(at);
    for f in fills {
        tokio::task::spawn_blocking(move || f.run());
    }
}
