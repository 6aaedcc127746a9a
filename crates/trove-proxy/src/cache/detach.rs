//! What a client that falls behind a body no longer stored may do (go on with a fetch of
//! its own for the rest), and the bodyless GET trove sends on a client's behalf after the
//! client's own exchange (a resumed body, a background revalidation).

use std::sync::Arc;

use http::{Method, Version};
use trove_cache::{resume, Conditionals};
use trove_store::Object;

use super::fetch::{self, Outgoing, Retry};
use super::Ctx;
use crate::client::head::{Framing, RequestHead};
use crate::origin::OriginRequestBody;
use crate::reply::{Detach, Resume};

/// What to do if this client falls too far behind `obj`'s body after it has left the store
/// (see `trove_store::Body`): go on with a fetch of its own for the rest when the response
/// has a strong validator (`trove_cache::resume`), else cut the client off.
pub(super) fn detach(cx: &Ctx<'_>, obj: &Object) -> Detach {
    let metrics = Arc::clone(&cx.shared.metrics);
    let Some(validator) = resume::validator(&obj.head.headers) else {
        return Detach {
            metrics,
            resume: None,
        };
    };
    let shared = Arc::clone(cx.shared);
    let target = cx.target.clone();
    let req = bodyless_get(cx.req);
    let (mode, client) = (cx.mode, cx.client);
    let reach = cx.reach.clone();
    let resume: Resume = Box::new(move |from, end| {
        Box::pin(async move {
            let extra = resume::request_fields(&validator, from, end)?;
            let out = Outgoing {
                req: &req,
                target: &target,
                mode,
                client,
                reach: &reach,
                conditionals: Conditionals::Strip,
                extra: Some(&extra),
                body: OriginRequestBody::empty(),
                retry: Retry::Allowed,
                interim: None,
                absolute_form: false,
            };
            let resp = fetch::send(&shared, out).await.ok()?;
            // Anything but the rest of this very representation is dropped unread.
            resume::resumes(&validator, from, end, resp.status, &resp.headers).then_some(resp)
        })
    });
    Detach {
        metrics,
        resume: Some(resume),
    }
}

/// A bodyless GET with the client's fields, for a request trove makes on a client's behalf
/// after the client's own exchange (a background revalidation, a resumed body).
pub(super) fn bodyless_get(req: &RequestHead) -> RequestHead {
    RequestHead {
        method: Method::GET,
        target: req.target.clone(),
        version: Version::HTTP_11,
        headers: req.headers.clone(),
        framing: Framing::None,
        keep_alive: true,
        expect_continue: false,
    }
}
