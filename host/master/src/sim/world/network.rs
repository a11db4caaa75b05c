//! The simulated network: messages lost, duplicated, delayed (and so
//! reordered); calls that time out.

use super::*;

impl World {
    // Network -------------------------------------------------------------------------------

    /// Sends a message: lost, duplicated or delayed as the fault mix says.
    /// A lost request or answer of a call (dispatch, probe) fails the call
    /// at its timeout.
    pub(super) fn send(&mut self, msg: Msg) {
        self.report.messages += 1;
        let f = self.config.faults.clone();
        let call = matches!(
            msg,
            Msg::Dispatch { .. }
                | Msg::Dispatched { .. }
                | Msg::Probe { .. }
                | Msg::Probed { .. }
                | Msg::Resources { .. }
                | Msg::Granted { .. }
        );
        if self.rng.chance(f.loss) {
            self.report.faults.lost += 1;
            self.note(|| format!("lost: {}", describe(&msg)));
            if call {
                self.time_out(msg);
            }
            return;
        }
        let mut delay = self.rng.between(1, 5);
        if self.rng.chance(f.delay) {
            self.report.faults.delayed += 1;
            delay += self.rng.between(1, f.max_delay_ms.max(1));
        }
        // A request slower than its call's timeout: the master gives up on
        // it (no answer), and it arrives all the same. An answer that would
        // come after the timeout is no answer.
        let msg = match msg {
            Msg::Dispatch { master, m_inc, worker, specs, late: false, deadline } if self.now + delay > deadline => {
                self.outlive_call(master, m_inc, worker, specs, deadline)
            }
            Msg::Dispatched { master, m_inc, worker, sent, deadline, .. } if self.now + delay > deadline => {
                self.answer_timed_out(master, m_inc, worker, sent, deadline);
                return;
            }
            msg => msg,
        };
        if !call && self.rng.chance(f.duplicate) {
            self.report.faults.duplicated += 1;
            let again = self.rng.between(1, f.max_delay_ms.max(10));
            let copy = match &msg {
                Msg::Result { master, m_inc, worker, w_inc, result } => Some(Msg::Result {
                    master: *master,
                    m_inc: *m_inc,
                    worker: *worker,
                    w_inc: *w_inc,
                    result: result.clone(),
                }),
                Msg::Acked { worker, w_inc, key, ack } => {
                    Some(Msg::Acked { worker: *worker, w_inc: *w_inc, key: key.clone(), ack: *ack })
                }
                Msg::Cancel { worker, key } => Some(Msg::Cancel { worker: *worker, key: key.clone() }),
                _ => None,
            };
            if let Some(copy) = copy {
                self.schedule(self.now + again, Event::Deliver(copy));
            }
        }
        self.schedule(self.now + delay, Event::Deliver(msg));
    }

    /// A dispatch's call ends, at its `deadline`, with no answer.
    fn answer_timed_out(
        &mut self,
        master: usize,
        m_inc: u32,
        worker: String,
        sent: Vec<(AttemptKey, i64, String)>,
        deadline: i64,
    ) {
        let answer = Err(DispatchError::NoAnswer { worker: worker.clone(), reason: "timed out".into() });
        let msg = Msg::Dispatched { master, m_inc, worker, sent, answer, deadline };
        self.schedule(deadline, Event::Deliver(msg));
    }

    /// A dispatch whose request reaches its worker only after the call
    /// timed out: the master gets no answer, and the request arrives late.
    pub(super) fn outlive_call(
        &mut self,
        master: usize,
        m_inc: u32,
        worker: usize,
        specs: Vec<AttemptSpec>,
        deadline: i64,
    ) -> Msg {
        let sent = crate::engine::sent_of(&specs);
        let id = self.workers[worker].id.clone();
        self.answer_timed_out(master, m_inc, id, sent, deadline);
        Msg::Dispatch { master, m_inc, worker, specs, late: true, deadline }
    }

    /// A call whose request or answer was lost ends in an error at its
    /// timeout.
    pub(super) fn time_out(&mut self, msg: Msg) {
        let at = self.now + HTTP_TIMEOUT_MS;
        match msg {
            Msg::Dispatch { master, m_inc, worker, specs, deadline, .. } => {
                let sent = crate::engine::sent_of(&specs);
                let worker = self.workers[worker].id.clone();
                self.answer_timed_out(master, m_inc, worker, sent, deadline);
            }
            Msg::Dispatched { master, m_inc, worker, sent, deadline, .. } => {
                self.answer_timed_out(master, m_inc, worker, sent, deadline)
            }
            // A member that does not answer may still run it: the shell
            // keeps it in flight (its result comes, or its lease ends).
            Msg::Probe { master, m_inc, probe, .. } | Msg::Probed { master, m_inc, probe, .. } => {
                let adoption = Adoption::Running;
                self.schedule(at, Event::Deliver(Msg::Probed { master, m_inc, probe, adoption }));
            }
            Msg::Resources { master, m_inc, .. } | Msg::Granted { master, m_inc, .. } => {
                let answer = Err("the resource leader did not answer in time".into());
                self.schedule(at, Event::Deliver(Msg::Granted { master, m_inc, answer }));
            }
            _ => {}
        }
    }

    pub(super) fn deliver(&mut self, msg: Msg) {
        self.note(|| format!("delivered: {}", describe(&msg)));
        match msg {
            Msg::Dispatch { master, m_inc, worker, specs, late, deadline } => {
                if self.workers[worker].alive {
                    self.accept(master, m_inc, worker, specs, late, deadline);
                } else if !late {
                    // A crashed process: the connection is refused, and
                    // nothing reached it.
                    let sent = crate::engine::sent_of(&specs);
                    let worker = self.workers[worker].id.clone();
                    let reason = "connection refused".into();
                    let answer = Err(DispatchError::Unreachable { worker: worker.clone(), reason });
                    self.schedule(
                        self.now + 1,
                        Event::Deliver(Msg::Dispatched { master, m_inc, worker, sent, answer, deadline }),
                    );
                }
            }
            Msg::Dispatched { master, m_inc, worker, sent, answer, .. } => {
                if self.masters[master].incarnation == m_inc && self.masters[master].state.is_some() {
                    self.masters[master].inbox.push(Input::Dispatched { worker, sent, answer });
                    self.wake(master, self.now + 1);
                }
            }
            Msg::Result { master, m_inc, worker, w_inc, result } => {
                let m = &mut self.masters[master];
                if m.incarnation != m_inc || m.state.is_none() {
                    return;
                }
                m.next_ack += 1;
                let ack = m.next_ack;
                m.acks.insert(ack, (worker, w_inc, result.key.clone()));
                m.inbox.push(Input::Result { result, ack: Some(ack) });
                self.wake(master, self.now + 1);
            }
            Msg::Acked { worker, w_inc, key, ack } => {
                let w = &mut self.workers[worker];
                if w.incarnation != w_inc || !matches!(ack, Ack::Applied | Ack::Stale) {
                    return;
                }
                if let (Some((result, _)), Ack::Stale) = (w.outbox.remove(&key), ack) {
                    w.stale.push_back(result);
                    if w.stale.len() > super::STALE_KEPT
                        && let Some(left) = w.stale.pop_front()
                    {
                        w.dropped.insert(left.key);
                    }
                }
            }
            Msg::Cancel { worker, key } => {
                if !self.workers[worker].alive {
                    return;
                }
                if let Some(run) = self.workers[worker].running.remove(&key) {
                    let outcome = Outcome::Failed { kind: FailureKind::Cancelled, message: "cancelled".into() };
                    self.report_result(worker, run, outcome);
                } else {
                    // Its dispatch may still come (overtaken, or held by a
                    // frozen worker): it is refused then.
                    self.workers[worker].disowned.insert(key);
                }
            }
            Msg::Probe { master, m_inc, worker, probe } => {
                let w = &mut self.workers[worker];
                if !w.alive {
                    self.time_out(Msg::Probe { master, m_inc, worker, probe });
                    return;
                }
                let asker = self.masters[master].id.clone();
                if let Some(at) = w.stale.iter().position(|r| r.key == probe.key)
                    && let Some(kept) = w.stale.remove(at)
                {
                    // Kept after a stale acknowledgement: it goes to the asker.
                    w.outbox.insert(probe.key.clone(), (kept, asker.clone()));
                    self.report.kept_results += 1;
                }
                let w = &mut self.workers[worker];
                let adoption = if let Some(run) = w.running.get_mut(&probe.key) {
                    run.epoch = probe.epoch;
                    run.master = asker;
                    Adoption::Running
                } else if let Some((result, target)) = w.outbox.get_mut(&probe.key) {
                    result.epoch = probe.epoch;
                    *target = asker;
                    Adoption::Finished(result.clone())
                } else {
                    w.disowned.insert(probe.key.clone());
                    // It vouches under its lease unless it dropped the
                    // attempt's result (one that left `stale`).
                    let never_under = (!w.dropped.contains(&probe.key)).then_some(w.lease as i64);
                    self.report.never_received += u64::from(never_under.is_some());
                    Adoption::Unknown { never_under }
                };
                self.send(Msg::Probed { master, m_inc, probe, adoption });
            }
            Msg::Probed { master, m_inc, probe, adoption } => {
                let m = &mut self.masters[master];
                if m.incarnation == m_inc && m.state.is_some() {
                    m.inbox.push(Input::Probed { key: probe.key, worker: probe.worker, epoch: probe.epoch, adoption });
                    self.wake(master, self.now + 1);
                }
            }
            Msg::Resources { master, m_inc, request } => self.exchange(master, m_inc, request),
            Msg::Granted { master, m_inc, answer } => self.granted(master, m_inc, answer),
        }
    }
}

/// One line for a message in the trace.
pub(super) fn describe(msg: &Msg) -> String {
    match msg {
        Msg::Dispatch { master, worker, specs, .. } => {
            format!("m{} → w{} dispatch {}", master + 1, worker + 1, keys(specs.iter().map(|s| &s.key)))
        }
        Msg::Dispatched { master, worker, answer, .. } => {
            let what = match answer {
                Ok(a) => format!("{} verdicts", a.verdicts.len()),
                Err(e) => e.to_string(),
            };
            format!("{worker} → m{} dispatched: {what}", master + 1)
        }
        Msg::Result { master, worker, result, .. } => {
            format!("w{} → m{} result {} (epoch {})", worker + 1, master + 1, key(&result.key), result.epoch)
        }
        Msg::Acked { worker, key: k, ack, .. } => format!("ack {ack:?} → w{} for {}", worker + 1, key(k)),
        Msg::Cancel { worker, key: k } => format!("cancel → w{} {}", worker + 1, key(k)),
        Msg::Probe { master, worker, probe, .. } => {
            format!("m{} → w{} probe {}", master + 1, worker + 1, key(&probe.key))
        }
        Msg::Probed { master, probe, adoption, .. } => {
            let what = match adoption {
                Adoption::Running => "running",
                Adoption::Finished(_) => "finished",
                Adoption::Unknown { never_under: None } => "unknown",
                Adoption::Unknown { never_under: Some(_) } => "unknown, never received under its lease",
                Adoption::Gone => "gone",
            };
            format!("probe of {} → m{}: {what}", key(&probe.key), master + 1)
        }
        Msg::Resources { master, request, .. } => {
            let want: u32 = request.want.iter().map(|w| w.slots).sum();
            let held: u32 = request.holding.iter().map(|h| h.slots).sum();
            format!("m{} → leader: holds {held}, wants {want}", master + 1)
        }
        Msg::Granted { master, answer, .. } => match answer {
            Ok(a) => format!("leader → m{}: holds {}", master + 1, a.held.iter().map(|h| h.slots).sum::<u32>()),
            Err(e) => format!("leader → m{}: {e}", master + 1),
        },
    }
}

pub(super) fn key(k: &AttemptKey) -> String {
    format!("{}/{}#{}", k.run_id, k.task, k.number)
}

pub(super) fn keys<'a>(ks: impl Iterator<Item = &'a AttemptKey>) -> String {
    ks.map(key).collect::<Vec<_>>().join(", ")
}
