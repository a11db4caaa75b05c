-- Masters' load reports and the weights the leader's rebalancer gives them
-- (weight in thousandths; 1000 = a full share of the slots).
CREATE TABLE master_loads (
    id         TEXT   NOT NULL PRIMARY KEY,
    load       BIGINT NOT NULL,
    weight     BIGINT NOT NULL DEFAULT 1000,
    updated_at BIGINT NOT NULL
);
