-- No query reads attempts by worker: a master reads its runs' running
-- attempts by run (the primary key's prefix). The index of running
-- attempts only cost writes: an entry when an attempt starts, its removal
-- when it ends, and on PostgreSQL it named the column every update of an
-- attempt changes, so no such update could stay on its page (HOT).
DROP INDEX attempts_running;
