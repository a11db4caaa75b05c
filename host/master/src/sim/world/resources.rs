//! The resource leader in the simulation (`SimConfig::resources` =
//! leader): the leading master's [`ResourceBook`], made anew for every
//! term, kept to the members, and the masters' exchanges with it over the
//! simulated network (lost, delayed, reordered; a lost one fails at its
//! timeout, as the real client's does).

use super::*;
use crate::resources::ResourceBook;

impl World {
    /// The book follows the leader: a new one for every term (empty, it
    /// listens before it grants), kept to the live workers and masters.
    pub(super) fn follow_book(&mut self, workers: &[WorkerInfo], members: &[usize]) {
        if self.config.resources != crate::Resources::Leader {
            return;
        }
        let term = self.leader.map(|(_, token)| token);
        if self.book.as_ref().map(ResourceBook::token) != term {
            self.book = term.map(|token| ResourceBook::new(token, self.now, crate::resource_leader::WARM_UP_MS));
        }
        if let Some(book) = self.book.as_mut() {
            book.set_workers(workers.to_vec());
            book.set_masters(members.iter().map(|&i| self.masters[i].id.as_str()));
        }
    }

    /// A master's exchange reaches whoever leads now: answered if that
    /// master is up and not frozen, else it times out.
    pub(super) fn exchange(&mut self, master: usize, m_inc: u32, request: ResourceRequest) {
        let answering = self
            .leader
            .filter(|(l, _)| self.is_member_master(*l) && !self.masters[*l].paused && self.masters[*l].state.is_some());
        let (Some(_), Some(book)) = (answering, self.book.as_mut()) else {
            self.time_out(Msg::Resources { master, m_inc, request });
            return;
        };
        let answer = book.exchange(&request, self.now).map_err(|e| e.to_string());
        self.send(Msg::Granted { master, m_inc, answer });
    }

    pub(super) fn granted(&mut self, master: usize, m_inc: u32, answer: Result<ResourceAnswer, String>) {
        let m = &mut self.masters[master];
        if m.incarnation == m_inc && m.state.is_some() {
            m.inbox.push(Input::Granted(answer));
            self.wake(master, self.now + 1);
        }
    }
}
