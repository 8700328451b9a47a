//! Memory the processes of one program share (`gpuless_traces::protocol::share`): each process
//! is a session with an executor of its own, so the server brokers what the driver would share
//! between them. An executor offers an exported descriptor under a token its client drew
//! ([`Control::Offer`]); another executor asks for it ([`Control::Take`]) and gets a duplicate
//! of the descriptor ([`Control::Given`]) if its session has the offerer's tenant. Offers end
//! with the offering executor's session (what was imported before stays, as the driver keeps it).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};

use super::{Channel, Control, Manager};

/// Most offers one executor may hold at a time.
pub(super) const MAX_OFFERS: usize = 4096;

/// One offered descriptor.
#[derive(Debug)]
struct Offer {
    /// The offering executor.
    exec: u64,
    /// Its session's tenant (`None` on a server without tenants).
    tenant: Option<String>,
    fd: OwnedFd,
}

/// The offers, by token.
#[derive(Debug, Default)]
pub(super) struct Shares {
    offers: HashMap<u128, Offer>,
}

impl Shares {
    /// Keeps `fd` under `token` for executor `exec`; why not, if it is refused.
    fn offer(&mut self, exec: u64, tenant: Option<String>, token: u128, fd: OwnedFd) -> Result<(), String> {
        if token == 0 || self.offers.contains_key(&token) {
            return Err("the token is taken".into());
        }
        if self.offers.values().filter(|o| o.exec == exec).count() >= MAX_OFFERS {
            return Err(format!("a session may offer at most {MAX_OFFERS} shared allocations at a time"));
        }
        self.offers.insert(token, Offer { exec, tenant, fd });
        Ok(())
    }

    /// A duplicate of the descriptor offered under `token`, for a session of `tenant`.
    fn take(&self, tenant: &Option<String>, token: u128) -> Result<OwnedFd, String> {
        match self.offers.get(&token) {
            Some(o) if &o.tenant == tenant => o.fd.try_clone().map_err(|e| format!("duplicating the descriptor: {e}")),
            // Another tenant's offer is as unknown as none.
            _ => Err("no session of this server offers that handle".into()),
        }
    }

    /// Forgets executor `exec`'s offers (its session ended).
    fn forget(&mut self, exec: u64) {
        self.offers.retain(|_, o| o.exec != exec);
    }

    /// How many offers there are.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.offers.len()
    }
}

impl Manager {
    /// [`Control::Offer`] from executor `id`: keeps the descriptor, answers with
    /// [`Control::Registered`].
    pub(super) fn offer_share(&self, id: u64, channel: &Channel, token: u128, fd: Option<OwnedFd>) {
        let tenant = self.tenant_of(id);
        let r = match fd {
            Some(fd) => self.shares().offer(id, tenant, token, fd),
            None => Err("an Offer without its descriptor".into()),
        };
        let error = r.err().unwrap_or_default();
        if let Err(e) = channel.send(&Control::Registered(error), None) {
            tracing::warn!(exec = id, error = %e, "could not answer an executor's Offer");
        }
    }

    /// [`Control::Take`] from executor `id`: answers with [`Control::Given`], the descriptor
    /// attached when it may have it.
    pub(super) fn take_share(&self, id: u64, channel: &Channel, token: u128) {
        let tenant = self.tenant_of(id);
        let r = self.shares().take(&tenant, token);
        let sent = match &r {
            Ok(fd) => channel.send(&Control::Given(String::new()), Some(fd.as_raw_fd())),
            Err(e) => channel.send(&Control::Given(e.clone()), None),
        };
        if let Err(e) = sent {
            tracing::warn!(exec = id, error = %e, "could not answer an executor's Take");
        }
    }

    /// Executor `id`'s session ended: its offers go.
    pub(super) fn forget_shares(&self, id: u64) {
        self.shares().forget(id);
    }

    fn shares(&self) -> std::sync::MutexGuard<'_, Shares> {
        self.shares.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> OwnedFd {
        std::fs::File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn offers_are_given_to_the_same_tenant_only_and_end_with_their_session() {
        let mut s = Shares::default();
        let a = Some("a".to_string());
        s.offer(1, a.clone(), 10, fd()).unwrap();
        assert!(s.offer(2, a.clone(), 10, fd()).is_err(), "a token is offered once");
        assert!(s.offer(2, a.clone(), 0, fd()).is_err());
        assert!(s.take(&a, 10).is_ok());
        assert!(s.take(&Some("b".into()), 10).is_err(), "another tenant does not get it");
        assert!(s.take(&None, 10).is_err());
        assert!(s.take(&a, 11).is_err());
        s.offer(2, a.clone(), 12, fd()).unwrap();
        s.forget(1);
        assert!(s.take(&a, 10).is_err(), "gone with its session");
        assert!(s.take(&a, 12).is_ok());
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn one_executor_cannot_hold_unbounded_offers() {
        let mut s = Shares::default();
        for t in 1..=MAX_OFFERS as u128 {
            s.offer(1, None, t, fd()).unwrap();
        }
        assert!(s.offer(1, None, u128::MAX, fd()).is_err());
        s.offer(2, None, u128::MAX, fd()).unwrap();
    }
}
