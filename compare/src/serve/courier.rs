//! Delivery of a step's events to the HTTP side with one wake-up per step. A message per
//! token per stream woke a runtime thread per message; on a machine whose cores all run the
//! forward pass, each of those threads preempts a compute thread (measured on the 2-core
//! VM, SmolLM2 at 4 streams: ~0.2 ms of the engine's step in delivery). Here the engine
//! holds the step's events and hands them over in one message to a task on the runtime,
//! which passes each to its stream's channel (a wake inside the runtime: no thread to
//! wake). Each job's events keep their order.

use tokio::runtime::Handle;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

use super::job::Event;

type Parcel = Vec<(UnboundedSender<Event>, Event)>;

pub struct Courier {
    /// The runtime's dispatcher; `None` (no runtime at start-up): events go out directly.
    to_runtime: Option<UnboundedSender<Parcel>>,
    held: Parcel,
}

impl Courier {
    /// A courier whose dispatcher runs on `runtime`.
    pub fn new(runtime: Option<Handle>) -> Courier {
        let to_runtime = runtime.map(|h| {
            let (tx, mut rx) = unbounded_channel::<Parcel>();
            h.spawn(async move {
                while let Some(parcel) = rx.recv().await {
                    for (to, ev) in parcel {
                        let _ = to.send(ev); // a closed stream: the client went away
                    }
                }
            });
            tx
        });
        Courier {
            to_runtime,
            held: Vec::new(),
        }
    }

    /// Queues `events` for `to`, in order, until [`Courier::flush`].
    pub fn hold(&mut self, to: &UnboundedSender<Event>, events: impl IntoIterator<Item = Event>) {
        self.held
            .extend(events.into_iter().map(|ev| (to.clone(), ev)));
    }

    /// Hands every held event over.
    pub fn flush(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let parcel = std::mem::take(&mut self.held);
        let parcel = match &self.to_runtime {
            Some(tx) => match tx.send(parcel) {
                Ok(()) => return,
                Err(e) => e.0, // the runtime is gone: deliver directly
            },
            None => parcel,
        };
        for (to, ev) in parcel {
            let _ = to.send(ev);
        }
    }
}
