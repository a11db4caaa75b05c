-- The runs waiting upstream, by slot: a master that takes slots over
-- wakes them (`OuterStore::waiting_in_slots`). Partial: a run is in it
-- while it waits. `state` is in other indexes' predicates already, so on
-- PostgreSQL no update that could stay on its page (HOT) is lost to it.
CREATE INDEX runs_waiting ON runs (slot) WHERE state = 'waiting';
